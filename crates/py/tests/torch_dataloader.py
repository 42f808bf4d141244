"""Real PyTorch over trove.torch (run by scripts/torch.sh, not by the default suite: PyPI's
torch is the multi-GB CUDA build). A DataLoader with 4 workers, 2 epochs, over:

- ImageFolder (map-style, shuffled sampler, batched fetch through __getitems__), checking that
  every file comes once per epoch, byte for byte, and once with trove.vision tensors;
- ShardDataset over WebDataset tar and TFRecord shards, as 2 ranks (world_size=2) each with its
  own 4-worker DataLoader, checking that every sample comes once per epoch across both ranks.

Usage: python torch_dataloader.py ROOT   (TROVE_CLUSTER names the cluster; ROOT holds synth/,
tar/ and tfr/ made by `trove dataset synth` and `pack`). Prints "torch-dataloader: PASS".
"""

import collections
import hashlib
import sys
import time

import torch
from torch.utils.data import DataLoader

import trove
from trove.data import parse_example
from trove.torch import ImageFolder, ShardDataset, vision_transform

WORKERS = 4
EPOCHS = 2


def digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def main(root: str) -> None:
    c = trove.Client()
    files = {}
    for dirpath, _, names in c.walk(f"{root}/synth"):
        for n in names:
            files[f"{dirpath}/{n}"] = c.read(f"{dirpath}/{n}")
    want = collections.Counter(digest(b) for b in files.values())
    print(f"torch {torch.__version__}, {len(files)} files, DataLoader num_workers={WORKERS}, {EPOCHS} epochs")

    ds = ImageFolder(f"{root}/synth", transform=digest, read_ahead=16)
    for epoch in range(EPOCHS):
        t = time.perf_counter()
        loader = DataLoader(ds, batch_size=16, shuffle=True, num_workers=WORKERS, collate_fn=lambda b: b, generator=torch.Generator().manual_seed(epoch))
        got = collections.Counter(d for batch in loader for d, _ in batch)
        assert got == want, f"ImageFolder epoch {epoch}: {sum(got.values())} samples, {len(got)} distinct, expected {len(want)} once each"
        print(f"ImageFolder epoch {epoch}: {sum(got.values())} samples, each file once, {time.perf_counter() - t:.2f} s")

    tensors = ImageFolder(f"{root}/synth", transform=vision_transform(size=224, normalize=True, seed=1))
    loader = DataLoader(tensors, batch_size=32, shuffle=True, num_workers=WORKERS)
    n = 0
    for images, labels in loader:
        assert images.dtype == torch.float32 and tuple(images.shape[1:]) == (3, 224, 224), images.shape
        assert labels.dtype == torch.int64
        n += images.shape[0]
    assert n == len(files), n
    print(f"ImageFolder + trove.vision: {n} tensors of 3x224x224 in batches of 32")

    for fmt in ("tar", "tfr"):
        datasets = [ShardDataset(f"{root}/{fmt}", shuffle_buffer=32, seed=5, read_ahead=2, rank=r, world_size=2) for r in range(2)]
        for epoch in range(EPOCHS):
            t = time.perf_counter()
            got = collections.Counter()
            for ds_r in datasets:
                ds_r.set_epoch(epoch)
                for batch in DataLoader(ds_r, batch_size=8, num_workers=WORKERS, collate_fn=lambda b: b):
                    for s in batch:
                        image = s["jpg"] if fmt == "tar" else parse_example(s["tfrecord"])["image/encoded"][0]
                        got[digest(image)] += 1
            assert got == want, f"{fmt} epoch {epoch}: {sum(got.values())} samples, expected {len(want)} once each"
            print(f"ShardDataset {fmt} epoch {epoch}: 2 ranks x {WORKERS} workers, {sum(got.values())} samples, each once, {time.perf_counter() - t:.2f} s")
    print("torch-dataloader: PASS")


if __name__ == "__main__":
    main(sys.argv[1])

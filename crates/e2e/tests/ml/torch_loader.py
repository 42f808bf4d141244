#!/usr/bin/env python3
"""A PyTorch DataLoader with several worker processes reading a directory of files, checked
byte for byte: every file must be read exactly once per epoch, with the bytes it was written
with.

The dataset is N files of varied sizes (empty, page and 4 MiB chunk boundaries, then a spread
up to several MiB) in class subdirectories, like an image folder. Each file's content is derived
from its index (numpy's PCG64 seeded with the index), and `manifest.json` records every file's
name, size and sha256. The Dataset lists the directory (as torchvision's ImageFolder does), and
each worker reads a file with plain open()/read() and hands its bytes to the main process as a
uint8 tensor; the main process hashes what it received and compares it with the manifest.

It runs against any directory: a Trove mount (scripts/ml-mount.sh) or a local one.

Usage: torch_loader.py DIR [--files N] [--epochs E] [--workers W] [--batch-size B]
                           [--write | --verify-only] [--drop-caches]

Without --write or --verify-only it writes the dataset when DIR has no manifest.json and
otherwise reads the one there (whose manifest is first checked against the derivation, so a
changed manifest cannot hide changed data). --drop-caches drops the page cache before each
epoch (root only), so every epoch reads through the file system instead of from memory.

Exit status: 0 when every epoch read every file once with the right bytes; 1 on any mismatch
(missing, extra, duplicated, short or changed files: the first ones are named on stderr);
2 on bad usage.
"""

import argparse
import hashlib
import json
import os
import sys
import time
import warnings

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

# 4 workers on a 2-core machine is the point here, not a mistake.
warnings.filterwarnings("ignore", message="This DataLoader will create")

MIB = 1 << 20
MANIFEST = "manifest.json"
SEED = 0x7E0F
CLASSES = 8
# Sizes every run includes: empty, one byte, page, 128 KiB (FUSE/kernel read size), 1 MiB,
# the 4 MiB chunk and 2 chunks, each exactly and off by one.
EDGE_SIZES = [0, 1, 4095, 4096, 4097, 131071, 131072, 131073, MIB, 4 * MIB - 1, 4 * MIB,
              4 * MIB + 1, 8 * MIB + 4097]


class Fail(Exception):
    pass


def content(index, size):
    """The bytes of file `index`: deterministic, different for every file and position."""
    return np.random.Generator(np.random.PCG64([SEED, index])).bytes(size)


def plan(files):
    """[(index, relative name, size)] for a dataset of `files` files."""
    rng = np.random.Generator(np.random.PCG64([SEED, 1 << 40]))
    sizes = list(EDGE_SIZES[:files])
    while len(sizes) < files:
        # Log-uniform between 1 KiB and 6 MiB: many small files, a few large ones.
        sizes.append(int(np.exp(rng.uniform(np.log(1024), np.log(6 * MIB)))))
    return [(i, f"train/class-{i % CLASSES:02d}/sample-{i:05d}.bin", s) for i, s in enumerate(sizes)]


def write_dataset(root, files):
    manifest = []
    start = time.monotonic()
    total = 0
    for index, name, size in plan(files):
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = content(index, size)
        with open(path, "wb") as f:
            f.write(data)
        manifest.append({"index": index, "name": name, "size": size, "sha256": hashlib.sha256(data).hexdigest()})
        total += size
    with open(os.path.join(root, MANIFEST), "w") as f:
        json.dump({"seed": SEED, "files": manifest}, f, indent=1)
    seconds = time.monotonic() - start
    print(f"wrote {files} files, {total} bytes in {seconds:.2f} s ({total / seconds / 1e6:.1f} MB/s)", flush=True)


def load_manifest(root):
    path = os.path.join(root, MANIFEST)
    try:
        with open(path) as f:
            manifest = json.load(f)["files"]
    except (OSError, ValueError, KeyError) as e:
        raise Fail(f"cannot read the manifest {path}: {e}")
    # The manifest must describe the derived content, so editing it cannot hide changed data.
    want = {name: (index, size) for index, name, size in plan(len(manifest))}
    for m in manifest:
        if want.get(m["name"]) != (m["index"], m["size"]):
            raise Fail(f"manifest entry {m['name']} is not part of the generated dataset")
        if hashlib.sha256(content(m["index"], m["size"])).hexdigest() != m["sha256"]:
            raise Fail(f"manifest sha256 of {m['name']} is not the sha256 of its derived content")
    return {m["name"]: m for m in manifest}


def list_files(root):
    """Relative paths of the regular files under root/train, sorted (like ImageFolder)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, "train")):
        dirnames.sort()
        for name in filenames:
            out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


class FileDataset(Dataset):
    def __init__(self, root, names):
        self.root = root
        self.names = names

    def __len__(self):
        return len(self.names)

    def __getitem__(self, i):
        info = get_worker_info()
        with open(os.path.join(self.root, self.names[i]), "rb") as f:
            st_size = os.fstat(f.fileno()).st_size
            data = f.read()
            extra = f.read()
        tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        return {"i": i, "worker": info.id if info else -1, "pid": os.getpid(), "st_size": st_size,
                "extra": len(extra), "data": tensor}


def keep_list(batch):
    return batch


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def run_epoch(epoch, root, names, manifest, args):
    loader = DataLoader(FileDataset(root, names), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, collate_fn=keep_list, timeout=args.timeout,
                        generator=torch.Generator().manual_seed(SEED + epoch))
    seen = [0] * len(names)
    errors = []
    workers, pids = set(), set()
    total = 0
    order = []
    start = time.monotonic()
    for batch in loader:
        for item in batch:
            i = item["i"]
            seen[i] += 1
            order.append(i)
            workers.add(item["worker"])
            pids.add(item["pid"])
            name = names[i]
            m = manifest[name]
            got = item["data"]
            n = got.numel()
            total += n
            if n != m["size"]:
                errors.append(f"{name}: read {n} bytes, expected {m['size']}")
            elif hashlib.sha256(got.numpy()).hexdigest() != m["sha256"]:
                errors.append(f"{name}: {n} bytes read with the wrong content (sha256 differs)")
            if item["st_size"] != m["size"]:
                errors.append(f"{name}: fstat size {item['st_size']}, expected {m['size']}")
            if item["extra"]:
                errors.append(f"{name}: {item['extra']} bytes after the first read reached end of file")
    seconds = time.monotonic() - start
    missing = [names[i] for i, c in enumerate(seen) if c == 0]
    repeated = [names[i] for i, c in enumerate(seen) if c > 1]
    errors += [f"{n}: never read in epoch {epoch}" for n in missing]
    errors += [f"{n}: read more than once in epoch {epoch}" for n in repeated]
    if len(workers) < min(args.workers, len(names)) and args.workers > 0:
        errors.append(f"only workers {sorted(workers)} of {args.workers} served files")
    print(f"epoch {epoch}: {len(order)} files, {total} bytes, {seconds:.2f} s, "
          f"{total / max(seconds, 1e-9) / 1e6:.1f} MB/s, {len(workers)} workers "
          f"({len(pids)} processes), errors {len(errors)}", flush=True)
    return errors, order


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--files", type=int, default=256, help="files to write (default 256)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--timeout", type=float, default=300, help="seconds a worker may take for one batch")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="(re)write the dataset first")
    mode.add_argument("--verify-only", action="store_true", help="read an existing dataset, never write")
    p.add_argument("--drop-caches", action="store_true", help="drop the page cache before each epoch (root)")
    args = p.parse_args()
    if args.files < 1 or args.epochs < 1 or args.workers < 0 or args.batch_size < 1:
        p.error("--files, --epochs and --batch-size must be positive, --workers not negative")
    root = os.path.abspath(args.dir)
    if not os.path.isdir(root):
        p.error(f"{root} is not a directory")

    print(f"torch {torch.__version__}, numpy {np.__version__}, python {sys.version.split()[0]}; "
          f"{root}: {args.workers} workers, batch size {args.batch_size}, {args.epochs} epochs", flush=True)
    try:
        has_manifest = os.path.exists(os.path.join(root, MANIFEST))
        if args.write or (not args.verify_only and not has_manifest):
            write_dataset(root, args.files)
        manifest = load_manifest(root)
        names = list_files(root)
        missing = sorted(set(manifest) - set(names))
        extra = sorted(set(names) - set(manifest))
        if missing or extra:
            raise Fail(f"directory listing differs from the manifest: missing {missing[:5]} "
                       f"({len(missing)} in all), unexpected {extra[:5]} ({len(extra)} in all)")
        total = sum(m["size"] for m in manifest.values())
        print(f"dataset: {len(names)} files, {total} bytes "
              f"(sizes {min(m['size'] for m in manifest.values())}..{max(m['size'] for m in manifest.values())})", flush=True)
        orders = []
        for epoch in range(args.epochs):
            if args.drop_caches:
                drop_caches()
            errors, order = run_epoch(epoch, root, names, manifest, args)
            if errors:
                raise Fail(f"epoch {epoch}: {len(errors)} problems:\n  " + "\n  ".join(errors[:20]))
            orders.append(order)
        if len(orders) > 1 and all(o == orders[0] for o in orders[1:]):
            raise Fail("every epoch read the files in the same order: shuffle=True had no effect")
    except Fail as e:
        print(f"FAIL: {e}", file=sys.stderr, flush=True)
        return 1
    except Exception as e:  # a worker's OSError (EIO, ENOENT, ...) or a DataLoader timeout
        print(f"FAIL: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1
    print(f"PASS: {args.epochs} epochs, every one of {len(names)} files read once per epoch "
          f"with the right bytes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Trains a real ResNet-50 on a GPU for a fixed number of steps from an ImageNet-like set and
reports images/s, the share of time the training loop waited for data, and the GPU's
utilization (sampled through NVML). Run by bench/gpu-train.sh, once per way of reading:

- ``synthetic``: random tensors made on the GPU, no storage (the GPU's own ceiling, as the
  reference papers' "synthetic data" runs);
- ``local`` / ``mount``: torchvision ``ImageFolder`` + Pillow on a directory (local disk or a
  ``trove mount``);
- ``sdk``: ``trove.torch.ImageFolder`` + ``trove.vision`` through the Python SDK, no FUSE.

Every way yields uint8 images (RandomResizedCrop to 224 and a random flip on the CPU); the GPU
converts and normalizes them, so the ways differ only in how bytes and pixels reach the GPU.
Mixed precision (bfloat16) and channels-last, SGD with momentum, as DGX ResNet-50 runs do.

Usage: python gpu_train.py WAY ROOT --steps N --warmup W --batch B --workers K
Prints one line ``result {json}``.
"""

import argparse
import json
import threading
import time

import torch
import torch.nn as nn
import torchvision
from torch.utils.data import DataLoader


def gpu_sampler(stop: threading.Event, samples: list) -> None:
    """Samples the GPU's utilization every 100 ms until ``stop`` is set (NVML's own sampling
    period is about as long)."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    while not stop.is_set():
        samples.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        time.sleep(0.1)
    pynvml.nvmlShutdown()


def make_loader(way: str, root: str, batch: int, workers: int):
    """The loader of ``way`` and whether it yields channels-last (N, H, W, C) images."""
    common = dict(batch_size=batch, shuffle=True, num_workers=workers, pin_memory=torch.cuda.is_available(), drop_last=True, persistent_workers=True, prefetch_factor=4)
    if way in ("local", "mount"):
        from torchvision import transforms as T

        tf = T.Compose([T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip(), T.PILToTensor()])
        ds = torchvision.datasets.ImageFolder(root, transform=tf)
        return DataLoader(ds, **common), False, len(ds.classes), len(ds)
    if way == "sdk":
        from trove.torch import ImageFolder, vision_transform

        ds = ImageFolder(root, transform=vision_transform(size=224), read_ahead=batch)
        return DataLoader(ds, **common), True, len(ds.classes), len(ds)
    raise SystemExit(f"unknown way {way!r}: synthetic, local, mount or sdk")


def batches(loader):
    """Batches without end: a new epoch when one ends."""
    while True:
        yield from loader


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("way")
    p.add_argument("root")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--workers", type=int, default=14)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--device", default="cuda", help="cpu checks the script on a machine without a GPU")
    a = p.parse_args()

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    torch.backends.cudnn.benchmark = True
    if a.way == "synthetic":
        hwc, classes, files = False, a.classes, 0
        x = torch.randint(0, 256, (a.batch, 3, 224, 224), dtype=torch.uint8, device=dev)
        y = torch.randint(0, classes, (a.batch,), device=dev)
        source = iter(lambda: (x, y), None)
    else:
        loader, hwc, classes, files = make_loader(a.way, a.root, a.batch, a.workers)
        source = batches(loader)

    model = torchvision.models.resnet50(num_classes=classes).to(dev, memory_format=torch.channels_last)
    # Goyal et al.'s rule: 0.1 per 256 images, reached by a linear ramp over the warm-up steps.
    base_lr = 0.1 * a.batch / 256
    opt = torch.optim.SGD(model.parameters(), lr=base_lr, momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255

    def step(images, labels):
        images = images.to(dev, non_blocking=True)
        if hwc:
            images = images.permute(0, 3, 1, 2)
        images = ((images.float() - mean) / std).contiguous(memory_format=torch.channels_last)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = loss_fn(model(images), labels.to(dev, non_blocking=True))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        for group in opt.param_groups:
            group["lr"] = base_lr * (i + 1) / a.warmup
        step(*next(source))
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()

    stop, util = threading.Event(), []
    sampler = threading.Thread(target=gpu_sampler, args=(stop, util), daemon=True)
    if cuda:
        sampler.start()
    waited = 0.0
    t0 = time.perf_counter()
    for _ in range(a.steps):
        w = time.perf_counter()
        images, labels = next(source)
        waited += time.perf_counter() - w
        loss = step(images, labels)
    sync()
    elapsed = time.perf_counter() - t0
    stop.set()
    if cuda:
        sampler.join()

    result = {
        "way": a.way,
        "images_per_s": round(a.steps * a.batch / elapsed, 1),
        "steps": a.steps,
        "batch": a.batch,
        "workers": 0 if a.way == "synthetic" else a.workers,
        "seconds": round(elapsed, 2),
        "data_wait_share": round(waited / elapsed, 3),
        "gpu_util_mean_pct": round(sum(util) / max(1, len(util)), 1),
        "gpu_util_samples": len(util),
        "files": files,
        "classes": classes,
        "final_loss": round(float(loss.detach()), 3),
        "gpu": torch.cuda.get_device_name(0) if cuda else "none",
        "torch": torch.__version__,
    }
    print("result " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

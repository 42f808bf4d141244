"""The native image pipeline: JPEG decode + crop + resize + flip (+ normalization) into NumPy
arrays, in Rust with the GIL released; a batch is spread over threads.

Outputs are NumPy arrays (``uint8`` HWC, or ``float32`` CHW when normalized); NumPy arrays
speak DLPack, so ``torch.from_dlpack(a)`` (or ``torch.from_numpy``) takes them without a copy.

Random choices come from ``seed``; the crop box is torchvision's ``RandomResizedCrop``
algorithm, and the resize is Pillow's bilinear filter, so the result matches
``img.crop(box).resize(size, Image.BILINEAR)`` in Pillow to within decoder rounding.
"""

from __future__ import annotations

import os

import numpy as np

from . import _native

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _size(size) -> tuple[int, int]:
    """(height, width) of an int or a pair."""
    if isinstance(size, int):
        return size, size
    h, w = size
    return int(h), int(w)


def jpeg_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the JPEG headers."""
    return _native.vision_jpeg_size(data)


def decode(data: bytes) -> np.ndarray:
    """The whole image as an (H, W, 3) uint8 array."""
    w, h, rgb = _native.vision_decode(data)
    return np.frombuffer(rgb, dtype=np.uint8).reshape(h, w, 3)


def random_resized_crop_box(width: int, height: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), seed: int = 0) -> tuple[int, int, int, int]:
    """The (left, top, width, height) box ``transform(crop="random", seed=seed)`` uses."""
    return _native.vision_random_resized_crop_box(width, height, tuple(scale), tuple(ratio), seed)


def _crop_args(crop, box):
    if box is not None:
        return "box", tuple(int(x) for x in box)
    if crop not in ("random", "center", "full"):
        raise ValueError(f"crop {crop!r} is not one of random, center, full (or pass box=)")
    return crop, None


def transform(
    data: bytes,
    size=224,
    crop: str = "random",
    scale=(0.08, 1.0),
    ratio=(3 / 4, 4 / 3),
    fraction: float = 0.875,
    box=None,
    flip: float = 0.5,
    seed: int | None = None,
    normalize: bool = False,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    out: np.ndarray | None = None,
    return_plan: bool = False,
):
    """Decode + crop + resize to ``size`` + horizontal flip with probability ``flip``.

    ``crop``: "random" (RandomResizedCrop with ``scale``/``ratio``), "center" (``fraction`` of
    each side), "full" (plain resize), or ``box=(left, top, width, height)``. Returns (H, W, 3)
    uint8, or with ``normalize`` (C, H, W) float32 ``(x/255 - mean)/std``. ``seed`` None draws
    one from ``os.urandom``."""
    h, w = _size(size)
    mode, b = _crop_args(crop, box)
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "little")
    rgb = out if (out is not None and not normalize) else np.empty((h, w, 3), dtype=np.uint8)
    plan = _native.vision_transform_into(data, rgb, w, h, mode, tuple(scale), tuple(ratio), float(fraction), b, float(flip), int(seed) & 0xFFFFFFFFFFFFFFFF)
    result = rgb
    if normalize:
        result = out if out is not None else np.empty((3, h, w), dtype=np.float32)
        _native.vision_normalize_into(rgb, w, h, tuple(map(float, mean)), tuple(map(float, std)), result)
    return (result, plan) if return_plan else result


def transform_batch(
    datas: list[bytes],
    size=224,
    crop: str = "random",
    scale=(0.08, 1.0),
    ratio=(3 / 4, 4 / 3),
    fraction: float = 0.875,
    flip: float = 0.5,
    seeds=None,
    threads: int | None = None,
    normalize: bool = False,
    mean=IMAGENET_MEAN,
    std=IMAGENET_STD,
    return_plans: bool = False,
):
    """``transform`` over a batch on ``threads`` threads (default: the CPUs this process may
    use): returns (N, H, W, 3) uint8 or, normalized, (N, 3, H, W) float32."""
    h, w = _size(size)
    mode, _ = _crop_args(crop, None)
    n = len(datas)
    if seeds is None:
        seeds = [int.from_bytes(os.urandom(8), "little") for _ in range(n)]
    seeds = [int(s) & 0xFFFFFFFFFFFFFFFF for s in seeds]
    if threads is None:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    datas = [d if isinstance(d, bytes) else bytes(d) for d in datas]
    out = np.empty((n, h, w, 3), dtype=np.uint8)
    plans = _native.vision_transform_batch_into(datas, out, w, h, mode, tuple(scale), tuple(ratio), float(fraction), float(flip), seeds, int(threads))
    result = out
    if normalize:
        result = np.empty((n, 3, h, w), dtype=np.float32)
        m, s = tuple(map(float, mean)), tuple(map(float, std))
        for i in range(n):
            _native.vision_normalize_into(out[i], w, h, m, s, result[i])
    return (result, plans) if return_plans else result


def encode_jpeg(rgb: np.ndarray, quality: int = 90) -> bytes:
    """Encodes an (H, W, 3) uint8 array as a baseline JPEG."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w, c = rgb.shape
    if c != 3:
        raise ValueError(f"expected (H, W, 3), got {rgb.shape}")
    return _native.vision_encode_jpeg(rgb.tobytes(), w, h, quality)

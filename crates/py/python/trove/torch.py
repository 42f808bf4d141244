"""PyTorch datasets over Trove, reading through the SDK (no mount in the path).

- :class:`ImageFolder`: map-style, the ImageFolder layout (``root/<class>/<file>``), samples
  are ``(image, class_index)``; ``__getitems__`` fetches a whole batch concurrently, which
  DataLoader uses when it exists.
- :class:`ShardDataset`: iterable over WebDataset tar or TFRecord shards, with shard order
  shuffled per epoch (``set_epoch``), an in-memory shuffle buffer, shards dealt over
  ``torch.distributed`` ranks and DataLoader workers without overlap, and ``read_ahead`` shards
  fetched in the background.

Only the base classes come from PyTorch: without it installed the classes derive from
``object`` and work the same (iterate them, index them), which is how the package's own tests
run. Every process, including each forked DataLoader worker, uses its own connections.
"""

from __future__ import annotations

import queue
import random
import threading
from typing import Callable, Iterator

from . import Client
from .data import Split, current_split, deal, epoch_order, hash_seed, iter_tar, iter_tfrecord, shuffle_buffer

try:
    import torch  # noqa: F401
    from torch.utils.data import Dataset as _MapBase
    from torch.utils.data import IterableDataset as _IterBase
except ImportError:  # the datasets work without PyTorch; only the base classes are missing
    _MapBase = object
    _IterBase = object

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".webp")


def vision_transform(size=224, crop="random", scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), flip=0.5, normalize=False, seed=0):
    """A transform for the datasets' ``transform=`` that runs ``trove.vision`` with a seed per
    (seed, epoch, sample), so augmentation is reproducible whatever worker runs it."""
    from . import vision

    def apply(data: bytes, index: int, epoch: int):
        return vision.transform(data, size=size, crop=crop, scale=scale, ratio=ratio, flip=flip, normalize=normalize, seed=hash_seed(seed, epoch, index))

    apply.takes_index = True
    return apply


def _apply(transform, data, index, epoch):
    if transform is None:
        return data
    if getattr(transform, "takes_index", False):
        return transform(data, index, epoch)
    return transform(data)


class ImageFolder(_MapBase):
    """``root/<class>/<image>`` on Trove. Classes are the sorted subdirectory names; samples
    are sorted by path. ``transform`` gets the file's bytes (or use :func:`vision_transform`).
    ``read_ahead``: files fetched at once by ``__getitems__`` and :meth:`iter_epoch`."""

    def __init__(self, root: str, cluster: str | None = None, client: Client | None = None, transform: Callable | None = None,
                 extensions=IMAGE_EXTENSIONS, read_ahead: int = 32, seed: int = 0):
        self.client = client or Client(cluster)
        self.root = "/" + root.strip("/")
        self.transform = transform
        self.read_ahead = max(1, read_ahead)
        self.seed = seed
        self.epoch = 0
        self.classes = sorted(e["name"] for e in self.client.scandir(self.root) if e["type"] == "directory")
        if not self.classes:
            raise FileNotFoundError(f"no class directories under trove:{self.root}")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples: list[tuple[str, int]] = []
        exts = tuple(e.lower() for e in extensions)
        for c in self.classes:
            base = f"{self.root.rstrip('/')}/{c}"
            for dirpath, _, files in self.client.walk(base):
                for f in sorted(files):
                    if f.lower().endswith(exts):
                        self.samples.append((f"{dirpath.rstrip('/')}/{f}", self.class_to_idx[c]))
        self.samples.sort()
        self.targets = [t for _, t in self.samples]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        return _apply(self.transform, self.client.read(path), index, self.epoch), target

    def __getitems__(self, indices: list[int]) -> list:
        paths = [self.samples[i][0] for i in indices]
        datas = self.client.read_many(paths, concurrency=self.read_ahead)
        return [(_apply(self.transform, d, i, self.epoch), self.samples[i][1]) for d, i in zip(datas, indices)]

    def indices(self, epoch: int | None = None, split: Split | None = None, shuffle: bool = True) -> list[int]:
        """This reader's sample indices for ``epoch``: a permutation seeded by (seed, epoch),
        dealt over every rank and worker (each index once in all)."""
        epoch = self.epoch if epoch is None else epoch
        return deal(epoch_order(len(self.samples), epoch, self.seed, shuffle), split or current_split())

    def iter_epoch(self, epoch: int | None = None, split: Split | None = None, shuffle: bool = True) -> Iterator:
        """This reader's samples of one epoch, fetched ``read_ahead`` at a time."""
        epoch = self.epoch if epoch is None else epoch
        self.epoch = epoch
        idx = self.indices(epoch, split, shuffle)
        for start in range(0, len(idx), self.read_ahead):
            yield from self.__getitems__(idx[start : start + self.read_ahead])


def _shard_format(path: str) -> str:
    if path.endswith(".tar"):
        return "tar"
    if path.endswith((".tfrecord", ".tfrecords")):
        return "tfrecord"
    raise ValueError(f"cannot tell the format of shard {path!r}: name it .tar or .tfrecord, or pass format=")


class ShardDataset(_IterBase):
    """Iterable over shards (``.tar`` WebDataset or ``.tfrecord``) on Trove: ``shards`` is a
    directory (every shard in it, sorted) or a list of paths.

    Per epoch (``set_epoch``, called on the dataset in the main process before each epoch, as
    with DistributedSampler) the shard order is shuffled with (seed, epoch) and dealt over
    ranks and workers; each reader mixes its samples through a ``shuffle_buffer``-sample
    buffer and keeps ``read_ahead`` shards being fetched in the background. Tar samples are
    dicts (extension -> bytes, ``__key__``, ``__shard__``); TFRecord samples are dicts with
    ``tfrecord`` (the record), ``__key__`` (``shard#i``) and ``__shard__``. ``decode`` maps a
    sample to what the loader yields."""

    def __init__(self, shards, cluster: str | None = None, client: Client | None = None, format: str | None = None,
                 shuffle_shards: bool = True, shuffle_buffer: int = 0, seed: int = 0, read_ahead: int = 2,
                 decode: Callable | None = None, rank: int | None = None, world_size: int | None = None,
                 worker: int | None = None, num_workers: int | None = None):
        self.client = client or Client(cluster)
        if isinstance(shards, str):
            base = "/" + shards.strip("/")
            shards = [f"{base}/{n}" for n in sorted(self.client.listdir(base)) if n.endswith((".tar", ".tfrecord", ".tfrecords"))]
        self.shards = list(shards)
        if not self.shards:
            raise FileNotFoundError("no shards to read")
        self.format = format
        for s in self.shards:
            if format is None:
                _shard_format(s)
        self.shuffle_shards = shuffle_shards
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed
        self.read_ahead = max(0, read_ahead)
        self.decode = decode
        self.epoch = 0
        self._split_args = (rank, world_size, worker, num_workers)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def my_shards(self, split: Split | None = None) -> list[str]:
        split = split or current_split(*self._split_args)
        order = epoch_order(len(self.shards), self.epoch, self.seed, self.shuffle_shards)
        return deal([self.shards[i] for i in order], split)

    def _fetch(self, paths: list[str]) -> Iterator[tuple[str, bytes]]:
        """The shards' bytes in order, ``read_ahead`` of them fetched ahead by a thread."""
        if self.read_ahead == 0:
            for p in paths:
                yield p, self.client.read(p)
            return
        q: queue.Queue = queue.Queue(maxsize=self.read_ahead)
        stop = threading.Event()

        def put(item) -> bool:
            """Hands an item over unless the consumer stopped; never blocks for good."""
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def fetch():
            for p in paths:
                if stop.is_set():
                    return
                try:
                    item = (p, self.client.read(p), None)
                except Exception as e:  # handed to the consumer, raised there
                    item = (p, None, e)
                if not put(item) or item[2] is not None:
                    return
            put(None)

        t = threading.Thread(target=fetch, name="trove-read-ahead", daemon=True)
        t.start()
        try:
            while True:
                item = q.get()
                if item is None:
                    return
                p, data, err = item
                if err is not None:
                    raise err
                yield p, data
        finally:
            stop.set()

    def _samples(self, paths: list[str]) -> Iterator[dict]:
        for path, data in self._fetch(paths):
            fmt = self.format or _shard_format(path)
            if fmt == "tar":
                yield from iter_tar(data, path)
            elif fmt == "tfrecord":
                for i, rec in enumerate(iter_tfrecord(data, path)):
                    yield {"__key__": f"{path}#{i}", "__shard__": path, "tfrecord": rec}
            else:
                raise ValueError(f"unknown shard format {fmt!r}")

    def __iter__(self) -> Iterator:
        split = current_split(*self._split_args)
        rng = random.Random(hash_seed(self.seed, self.epoch, split.reader))
        for sample in shuffle_buffer(self._samples(self.my_shards(split)), self.shuffle_buffer, rng):
            yield self.decode(sample) if self.decode is not None else sample

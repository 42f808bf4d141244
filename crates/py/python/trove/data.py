"""Dataset formats and splitting rules, with no dependency on PyTorch.

- WebDataset tar shards: members grouped into samples by key (the member name up to the first
  dot of its base name), e.g. ``n01440764_10026.jpg`` + ``n01440764_10026.cls``.
- TFRecord shards: ``uint64 length, uint32 masked_crc32c(length), data, uint32
  masked_crc32c(data)``, each CRC checked; ``parse_example`` reads ``tf.train.Example``.
- Splitting: who reads what in a run of ``world_size`` ranks with ``num_workers`` loader
  workers each. Shards are dealt round robin over every (rank, worker) after a shuffle seeded
  by (seed, epoch), so every shard is read exactly once per epoch and no two readers overlap;
  map-style indices are dealt the same way.
"""

from __future__ import annotations

import os
import random
import struct
import tarfile
import io
from dataclasses import dataclass
from typing import Iterable, Iterator

from . import _native


class FormatError(ValueError):
    """A shard that is not valid in its format (names the shard and the byte offset)."""


@dataclass(frozen=True)
class Split:
    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    @property
    def reader(self) -> int:
        """This reader's index among all ``readers`` (rank-major)."""
        return self.rank * self.num_workers + self.worker

    @property
    def readers(self) -> int:
        return self.world_size * self.num_workers

    def check(self) -> "Split":
        if not (0 <= self.rank < self.world_size and 0 <= self.worker < self.num_workers):
            raise ValueError(f"invalid split {self}")
        return self


def current_split(rank: int | None = None, world_size: int | None = None, worker: int | None = None, num_workers: int | None = None) -> Split:
    """The split of the calling process: explicit arguments first, then torch.distributed (when
    PyTorch is imported and a process group is initialised) or the RANK/WORLD_SIZE environment
    variables, and the DataLoader worker (``torch.utils.data.get_worker_info()``)."""
    import sys

    torch = sys.modules.get("torch")
    if rank is None or world_size is None:
        r, w = 0, 1
        dist = getattr(torch, "distributed", None) if torch is not None else None
        if dist is not None and dist.is_available() and dist.is_initialized():
            r, w = dist.get_rank(), dist.get_world_size()
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        rank = r if rank is None else rank
        world_size = w if world_size is None else world_size
    if worker is None or num_workers is None:
        wi, wn = 0, 1
        if torch is not None:
            info = torch.utils.data.get_worker_info()
            if info is not None:
                wi, wn = info.id, info.num_workers
        worker = wi if worker is None else worker
        num_workers = wn if num_workers is None else num_workers
    return Split(rank, world_size, worker, num_workers).check()


def epoch_order(n: int, epoch: int, seed: int, shuffle: bool) -> list[int]:
    """0..n-1, shuffled by (seed, epoch) when asked: the same on every rank and worker."""
    order = list(range(n))
    if shuffle:
        random.Random(hash_seed(seed, epoch)).shuffle(order)
    return order


def hash_seed(*parts: int) -> int:
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x ^= (int(p) + 0x9E3779B97F4A7C15 + (x << 6) + (x >> 2)) & 0xFFFFFFFFFFFFFFFF
        x = (x * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return x


def deal(items: list, split: Split) -> list:
    """This reader's share: every ``readers``-th item from its index. Shares are disjoint and
    together hold every item once."""
    return items[split.reader :: split.readers]


def shuffle_buffer(samples: Iterable, size: int, rng: random.Random) -> Iterator:
    """Yields ``samples`` in an order mixed through a buffer of ``size`` (WebDataset's
    ``shuffle``): each sample once, none held back at the end."""
    if size <= 1:
        yield from samples
        return
    buf: list = []
    for s in samples:
        if len(buf) < size:
            buf.append(s)
            continue
        i = rng.randrange(len(buf))
        yield buf[i]
        buf[i] = s
    rng.shuffle(buf)
    yield from buf


def sample_key(name: str) -> tuple[str, str]:
    """WebDataset's (key, extension) of a member name: ``a/b.c.jpg`` -> (``a/b``, ``c.jpg``)."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1 :]


def iter_tar(data: bytes, shard: str = "") -> Iterator[dict]:
    """Samples of a WebDataset tar shard: dicts of extension -> bytes plus ``__key__`` and
    ``__shard__``, in member order."""
    try:
        tf = tarfile.open(fileobj=io.BytesIO(data), mode="r:")
    except tarfile.TarError as e:
        raise FormatError(f"{shard}: not a tar file: {e}") from e
    current: dict | None = None
    with tf:
        try:
            for m in tf:
                if not m.isfile():
                    continue
                key, ext = sample_key(m.name)
                if current is not None and current["__key__"] != key:
                    yield current
                    current = None
                if current is None:
                    current = {"__key__": key, "__shard__": shard}
                f = tf.extractfile(m)
                current[ext] = f.read() if f is not None else b""
        except tarfile.TarError as e:
            raise FormatError(f"{shard}: damaged tar file: {e}") from e
    if current is not None:
        yield current


def iter_tfrecord(data: bytes, shard: str = "", check_crc: bool = True) -> Iterator[bytes]:
    """Records of a TFRecord shard, both CRCs checked."""
    pos, n = 0, len(data)
    mv = memoryview(data)
    while pos < n:
        if pos + 12 > n:
            raise FormatError(f"{shard}: truncated TFRecord header at byte {pos}")
        (length,) = struct.unpack_from("<Q", data, pos)
        (length_crc,) = struct.unpack_from("<I", data, pos + 8)
        if check_crc and _native.masked_crc32c(bytes(mv[pos : pos + 8])) != length_crc:
            raise FormatError(f"{shard}: TFRecord length checksum mismatch at byte {pos}")
        start, end = pos + 12, pos + 12 + length
        if end + 4 > n:
            raise FormatError(f"{shard}: TFRecord at byte {pos} runs past the end of the shard")
        record = bytes(mv[start:end])
        (data_crc,) = struct.unpack_from("<I", data, end)
        if check_crc and _native.masked_crc32c(record) != data_crc:
            raise FormatError(f"{shard}: TFRecord data checksum mismatch in the record at byte {pos}")
        yield record
        pos = end + 4


def tfrecord_frame(record: bytes) -> bytes:
    """One record framed as TFRecord."""
    header = struct.pack("<Q", len(record))
    return header + struct.pack("<I", _native.masked_crc32c(header)) + record + struct.pack("<I", _native.masked_crc32c(record))


def _varint(b: bytes, pos: int) -> tuple[int, int]:
    v, shift = 0, 0
    while True:
        if pos >= len(b) or shift > 63:
            raise FormatError("bad varint in Example")
        byte = b[pos]
        pos += 1
        v |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return v, pos
        shift += 7


def _fields(b: bytes) -> Iterator[tuple[int, int, object]]:
    pos = 0
    while pos < len(b):
        key, pos = _varint(b, pos)
        wt = key & 7
        if wt == 2:
            n, pos = _varint(b, pos)
            if pos + n > len(b):
                raise FormatError("field overruns Example")
            yield key >> 3, wt, b[pos : pos + n]
            pos += n
        elif wt == 0:
            v, pos = _varint(b, pos)
            yield key >> 3, wt, v
        elif wt == 5:
            yield key >> 3, wt, b[pos : pos + 4]
            pos += 4
        elif wt == 1:
            yield key >> 3, wt, b[pos : pos + 8]
            pos += 8
        else:
            raise FormatError(f"unexpected wire type {wt} in Example")


def parse_example(record: bytes) -> dict:
    """A ``tf.train.Example``'s features: name -> list of bytes, ints or floats."""
    out: dict = {}
    for f, _, features in _fields(record):
        if f != 1:
            continue
        for f2, _, entry in _fields(features):
            if f2 != 1:
                continue
            key, value = None, b""
            for f3, _, v in _fields(entry):
                if f3 == 1:
                    key = v.decode()
                elif f3 == 2:
                    value = v
            if key is None:
                continue
            for kind, _, lst in _fields(value):
                if kind == 1:
                    out[key] = [v for n, _, v in _fields(lst) if n == 1]
                elif kind == 2:
                    vals = []
                    for n, wt, v in _fields(lst):
                        if n == 1 and wt == 2:
                            vals += [x[0] for x in struct.iter_unpack("<f", v)]
                        elif n == 1 and wt == 5:
                            vals.append(struct.unpack("<f", v)[0])
                    out[key] = vals
                elif kind == 3:
                    vals = []
                    for n, wt, v in _fields(lst):
                        if n == 1 and wt == 2:
                            p = 0
                            while p < len(v):
                                x, p = _varint(v, p)
                                vals.append(x - (1 << 64) if x >= 1 << 63 else x)
                        elif n == 1 and wt == 0:
                            vals.append(v - (1 << 64) if v >= 1 << 63 else v)
                    out[key] = vals
    return out

"""Trove's Python SDK.

``trove.Client`` talks to a Trove cluster through the client library (no FUSE in the path):
every call releases the GIL while it waits, reads land in the caller's buffers, and a forked
child (a DataLoader worker) gets its own connections on first use. ``trove://`` URLs work in
fsspec, pandas and PyArrow (``trove.fs``); ``trove.torch`` has PyTorch datasets; ``trove.vision``
is the native JPEG pipeline; ``trove.data`` holds the shard formats and the splitting rules.
"""

from __future__ import annotations

import io
import os
import tomllib
from typing import Iterator

from . import _native

__all__ = ["Client", "File", "resolve_cluster", "resolve_credentials", "default_client"]


def resolve_cluster(cluster: str | None = None) -> str:
    """The metadata service address for ``cluster``: ``HOST:PORT`` (several comma-separated),
    the directory of a local cluster made by ``trove cluster start``, or, when None, the
    ``TROVE_CLUSTER`` environment variable."""
    cluster = cluster or os.environ.get("TROVE_CLUSTER")
    if not cluster:
        raise ValueError("no Trove cluster given: pass HOST:PORT or a cluster directory, or set TROVE_CLUSTER")
    state = os.path.join(cluster, "cluster.toml")
    if os.path.isfile(state):
        with open(state, "rb") as f:
            return tomllib.load(f)["meta"]["addr"]
    if ":" in cluster:
        return cluster
    raise ValueError(f"{cluster!r} is neither HOST:PORT nor a directory holding cluster.toml")


def resolve_credentials(cluster: str | None = None, credentials: str | None = None) -> str | None:
    """The TLS credential directory (ca.pem, cert.pem, key.pem) to reach ``cluster`` with:
    ``credentials``, else the ``TROVE_CREDENTIALS`` environment variable, else the admin
    credential of a local cluster directory that has one, else None (plaintext)."""
    credentials = credentials or os.environ.get("TROVE_CREDENTIALS")
    if credentials:
        return credentials
    cluster = cluster or os.environ.get("TROVE_CLUSTER")
    if cluster:
        admin = os.path.join(cluster, "tls", "admin")
        if os.path.isfile(os.path.join(admin, "cert.pem")):
            return admin
    return None


def _norm(path: str) -> str:
    """Cluster paths are absolute; "a/b", "/a/b/" and "/a/b" name the same file."""
    return "/" + path.strip("/")


class File(io.RawIOBase):
    """An open Trove file: ``read``/``readinto``/``seek``/``tell`` for "rb", ``write`` for
    "wb" (published under its name, atomically, by ``close``). Wrap it in
    ``io.BufferedReader`` for many tiny reads; large reads are best made directly."""

    def __init__(self, native: "_native.File", mode: str):
        super().__init__()
        self._f = native
        self.mode = mode
        self.name = native.path

    def readable(self) -> bool:
        return not self._f.writable

    def writable(self) -> bool:
        return self._f.writable

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self._f.readinto(buffer)

    def read(self, size: int = -1) -> bytes:
        return self._f.read(-1 if size is None else size)

    def readall(self) -> bytes:
        return self._f.read(-1)

    def write(self, data) -> int:
        return self._f.write(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def size(self) -> int:
        return self._f.size()

    def close(self) -> None:
        """Closes the file; one being written is published under its name (atomically)."""
        if not self.closed:
            try:
                self._f.close()
            finally:
                super().close()

    def abort(self) -> None:
        """Discards a file being written: the target keeps what it had."""
        if not self.closed:
            try:
                self._f.abort()
            finally:
                super().close()

    def __exit__(self, exc_type, exc, tb):
        # A write cut short by an exception is not published as if it were complete.
        if exc_type is not None and self.writable():
            self.abort()
        else:
            self.close()
        return False

    def __del__(self):
        # Unlike io's files, a write never closed is discarded, not published half done.
        try:
            if not self.closed and self._f.writable:
                self.abort()
            else:
                self.close()
        except Exception:
            pass


class Client:
    """A connection to one Trove cluster (see :func:`resolve_cluster` for ``cluster``).

    Paths are absolute within the cluster ("/datasets/imagenet/train"). Errors are ``OSError``
    subclasses (``FileNotFoundError``, ``FileExistsError``, ``NotADirectoryError``, ...)."""

    def __init__(self, cluster: str | None = None, credentials: str | None = None):
        self.credentials = resolve_credentials(cluster, credentials)
        self.cluster = resolve_cluster(cluster)
        self._c = _native.Client(self.cluster, self.credentials)

    def __reduce__(self):
        # A pickled client (DataLoader with the spawn start method) connects again where it
        # is unpickled.
        return (Client, (self.cluster, self.credentials))

    def __repr__(self) -> str:
        return f"trove.Client({self.cluster!r})"

    def stat(self, path: str) -> dict:
        return self._c.stat(_norm(path))

    def exists(self, path: str) -> bool:
        return self._c.exists(_norm(path))

    def isdir(self, path: str) -> bool:
        try:
            return self.stat(path)["type"] == "directory"
        except FileNotFoundError:
            return False

    def listdir(self, path: str = "/") -> list[str]:
        return self._c.listdir(_norm(path))

    def scandir(self, path: str = "/") -> list[dict]:
        return self._c.scandir(_norm(path))

    def walk(self, top: str = "/") -> Iterator[tuple[str, list[str], list[str]]]:
        """Like ``os.walk`` (top-down): (dirpath, dirnames, filenames); dirnames may be edited
        in place to prune the walk."""
        top = _norm(top)
        entries = self.scandir(top)
        dirs = [e["name"] for e in entries if e["type"] == "directory"]
        files = [e["name"] for e in entries if e["type"] != "directory"]
        yield top, dirs, files
        for d in dirs:
            yield from self.walk(top.rstrip("/") + "/" + d)

    def makedirs(self, path: str, exist_ok: bool = True) -> None:
        self._c.makedirs(_norm(path), exist_ok)

    def mkdir(self, path: str) -> None:
        self._c.mkdir(_norm(path))

    def remove(self, path: str) -> None:
        self._c.remove(_norm(path))

    unlink = remove

    def rmdir(self, path: str) -> None:
        self._c.rmdir(_norm(path))

    def rename(self, src: str, dst: str) -> None:
        self._c.rename(_norm(src), _norm(dst))

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        return self._c.read(_norm(path), offset, length)

    def readinto(self, path: str, buffer, offset: int = 0) -> int:
        return self._c.readinto(_norm(path), buffer, offset)

    def read_many(self, paths: list[str], concurrency: int = 16) -> list[bytes]:
        return self._c.read_many([_norm(p) for p in paths], concurrency)

    def write(self, path: str, data) -> None:
        self._c.write(_norm(path), data)

    def open(self, path: str, mode: str = "rb") -> File:
        return File(self._c.open(_norm(path), mode), mode)

    def connected_pid(self) -> int | None:
        return self._c.connected_pid()


_default: Client | None = None


def default_client() -> Client:
    """A client for ``TROVE_CLUSTER`` (one, shared; a forked child reconnects on first use)."""
    global _default
    if _default is None:
        _default = Client()
    return _default

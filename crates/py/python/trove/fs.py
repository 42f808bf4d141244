"""An fsspec file system for ``trove://`` URLs (registered through the ``fsspec.specs`` entry
point), so pandas, PyArrow, Hugging Face ``datasets`` and anything else built on fsspec read
and write Trove directly.

``trove://datasets/a/b.parquet`` is ``/datasets/a/b.parquet`` in the cluster named by the
``cluster`` storage option or, without one, ``TROVE_CLUSTER`` (``HOST:PORT`` or a local
cluster directory), as S3 URLs name a bucket and a key.
"""

from __future__ import annotations

import fsspec
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from . import Client, _native


class TroveFileSystem(AbstractFileSystem):
    protocol = ("trove",)
    root_marker = "/"

    def __init__(self, cluster: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.client = Client(cluster)

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        for p in ("trove://", "trove:"):
            if path.startswith(p):
                path = path[len(p):]
                break
        return "/" + path.strip("/")

    def _info(self, st: dict, path: str) -> dict:
        return {
            "name": path,
            "size": st["size"],
            "type": "directory" if st["type"] == "directory" else "file",
            "mtime": st["mtime"],
            "ino": st["ino"],
            "mode": st["mode"],
        }

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        return self._info(self.client.stat(path), path)

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        st = self.client.stat(path)
        if st["type"] != "directory":
            entries = [self._info(st, path)]
        else:
            base = path.rstrip("/")
            entries = [self._info(e, f"{base}/{e['name']}") for e in self.client.scandir(path)]
        return entries if detail else [e["name"] for e in entries]

    def mkdir(self, path, create_parents=True, **kwargs):
        path = self._strip_protocol(path)
        if create_parents:
            self.client.makedirs(path, exist_ok=True)
        else:
            self.client.mkdir(path)

    def makedirs(self, path, exist_ok=False):
        self.client.makedirs(self._strip_protocol(path), exist_ok=exist_ok)

    def rmdir(self, path):
        self.client.rmdir(self._strip_protocol(path))

    def _rm(self, path):
        path = self._strip_protocol(path)
        if self.client.isdir(path):
            self.client.rmdir(path)
        else:
            self.client.remove(path)

    def rm_file(self, path):
        self.client.remove(self._strip_protocol(path))

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        self.client.rename(self._strip_protocol(path1), self._strip_protocol(path2))

    def cp_file(self, path1, path2, **kwargs):
        self.client.write(self._strip_protocol(path2), self.client.read(self._strip_protocol(path1)))

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        size = None
        if start is not None and start < 0 or end is not None and end < 0:
            size = self.client.stat(path)["size"]
        start = 0 if start is None else (start if start >= 0 else max(0, size + start))
        if end is None:
            return self.client.read(path, start, -1)
        end = end if end >= 0 else max(0, size + end)
        return self.client.read(path, start, max(0, end - start))

    def pipe_file(self, path, value, **kwargs):
        self.client.write(self._strip_protocol(path), value)

    def created(self, path):
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], tz=datetime.timezone.utc)

    modified = created

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        path = self._strip_protocol(path)
        return TroveFile(self, path, mode, block_size=block_size or "default", autocommit=autocommit, cache_options=cache_options, **kwargs)


class TroveFile(AbstractBufferedFile):
    """fsspec's buffered file over Trove: ranged reads through one open handle (so the client
    library's read-ahead follows a sequential reader), writes through a handle that publishes
    the file atomically at close."""

    DEFAULT_BLOCK_SIZE = 4 << 20

    def __init__(self, fs, path, mode="rb", **kwargs):
        self._handle = None
        super().__init__(fs, path, mode, **kwargs)

    def _fetch_range(self, start, end):
        if self._handle is None:
            self._handle = self.fs.client.open(self.path, "rb")
        self._handle.seek(start)
        return self._handle.read(end - start)

    def _initiate_upload(self):
        self._handle = self.fs.client.open(self.path, "wb")

    def _upload_chunk(self, final=False):
        if self._handle is None:
            self._initiate_upload()
        self._handle.write(self.buffer.getvalue())
        if final:
            self._handle.close()
            self._handle = None
        return True

    def close(self):
        try:
            super().close()
        finally:
            if self._handle is not None and "r" in self.mode:
                self._handle.close()
                self._handle = None


fsspec.register_implementation("trove", TroveFileSystem, clobber=True)

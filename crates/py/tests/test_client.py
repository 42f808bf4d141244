"""trove.Client round trips against a real cluster, fork safety, and fsspec with pandas and
PyArrow."""

import multiprocessing
import os
import signal
import threading
import unittest

import numpy as np

import trove
from support import client, fresh_dir

CHUNK = 4 << 20


# The client the pool's workers inherit through fork (not pickled: arguments would be).
_INHERITED = None


def _child_read(path):
    """Runs in a forked pool worker: reads through the client inherited from the parent."""
    c = _INHERITED
    data = c.read(path)
    return os.getpid(), c.connected_pid(), len(data), data[:16]


class ClientRoundTrips(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = client()
        cls.d = fresh_dir("client")

    def test_write_read_across_chunks(self):
        data = np.random.default_rng(1).integers(0, 256, 2 * CHUNK + 12345, dtype=np.uint8).tobytes()
        p = f"{self.d}/big.bin"
        with self.c.open(p, "wb") as f:
            for i in range(0, len(data), 1_000_000):
                self.assertEqual(f.write(data[i : i + 1_000_000]), len(data[i : i + 1_000_000]))
        self.assertEqual(self.c.stat(p)["size"], len(data))
        self.assertEqual(self.c.read(p), data)
        # Ranges, including ones crossing a chunk boundary and past the end.
        self.assertEqual(self.c.read(p, CHUNK - 10, 20), data[CHUNK - 10 : CHUNK + 10])
        self.assertEqual(self.c.read(p, len(data) - 5, 100), data[-5:])
        self.assertEqual(self.c.read(p, len(data) + 5), b"")
        # readinto straight into a NumPy array and a bytearray.
        arr = np.zeros(CHUNK + 7, dtype=np.uint8)
        self.assertEqual(self.c.readinto(p, arr, CHUNK - 3), CHUNK + 7)
        self.assertEqual(arr.tobytes(), data[CHUNK - 3 : 2 * CHUNK + 4])
        buf = bytearray(100)
        self.assertEqual(self.c.readinto(p, buf, len(data) - 40), 40)
        self.assertEqual(bytes(buf[:40]), data[-40:])
        with self.assertRaises(ValueError):
            self.c.readinto(p, b"read-only bytes")
        # File objects: seek, tell, read, readinto.
        with self.c.open(p) as f:
            f.seek(CHUNK + 1)
            self.assertEqual(f.read(10), data[CHUNK + 1 : CHUNK + 11])
            self.assertEqual(f.tell(), CHUNK + 11)
            f.seek(-4, 2)
            self.assertEqual(f.read(), data[-4:])
            f.seek(0)
            mv = memoryview(bytearray(64))
            self.assertEqual(f.readinto(mv), 64)
            self.assertEqual(bytes(mv), data[:64])
        with self.assertRaises(ValueError):
            f.read(1)

    def test_namespace(self):
        c, d = self.c, self.d
        c.makedirs(f"{d}/n/a/b")
        c.makedirs(f"{d}/n/a/b")  # exist_ok by default
        with self.assertRaises(FileExistsError):
            c.makedirs(f"{d}/n/a/b", exist_ok=False)
        c.write(f"{d}/n/a/x.txt", b"x")
        c.write(f"{d}/n/a/b/y.txt", bytearray(b"yy"))
        self.assertEqual(sorted(c.listdir(f"{d}/n/a")), ["b", "x.txt"])
        walked = list(c.walk(f"{d}/n"))
        self.assertEqual(walked, [(f"{d}/n", ["a"], []), (f"{d}/n/a", ["b"], ["x.txt"]), (f"{d}/n/a/b", [], ["y.txt"])])
        st = c.stat(f"{d}/n/a/b/y.txt")
        self.assertEqual((st["type"], st["size"], st["name"]), ("file", 2, "y.txt"))
        self.assertEqual(c.stat(f"{d}/n/a")["type"], "directory")
        c.rename(f"{d}/n/a/x.txt", f"{d}/n/a/b/z.txt")
        self.assertEqual(c.read(f"{d}/n/a/b/z.txt"), b"x")
        self.assertFalse(c.exists(f"{d}/n/a/x.txt"))
        with self.assertRaises(FileNotFoundError):
            c.stat(f"{d}/n/a/x.txt")
        with self.assertRaises(FileNotFoundError):
            c.read(f"{d}/nope")
        with self.assertRaises(IsADirectoryError):
            c.open(f"{d}/n/a")
        with self.assertRaises(IsADirectoryError):
            c.remove(f"{d}/n/a")
        with self.assertRaises(NotADirectoryError):
            c.listdir(f"{d}/n/a/b/z.txt")
        with self.assertRaises(OSError):
            c.rmdir(f"{d}/n/a")  # not empty
        c.remove(f"{d}/n/a/b/z.txt")
        c.remove(f"{d}/n/a/b/y.txt")
        c.rmdir(f"{d}/n/a/b")
        self.assertEqual(c.listdir(f"{d}/n/a"), [])
        with self.assertRaises(ValueError):
            c.open(f"{d}/n/a/q", "a")

    def test_writes_are_published_only_by_close(self):
        c, p = self.c, f"{self.d}/atomic.txt"
        c.write(p, b"old")
        f = c.open(p, "wb")
        f.write(b"new content that is never closed")
        self.assertEqual(c.read(p), b"old")
        self.assertEqual(c.listdir(self.d).count("atomic.txt"), 1)
        del f  # abandoned: the target keeps its content, no temporary name shows
        import gc

        gc.collect()
        self.assertEqual(c.read(p), b"old")
        self.assertTrue(all(not n.startswith(".trove-tmp.") for n in c.listdir(self.d)))
        with c.open(p, "wb") as f:
            f.write(b"new")
        self.assertEqual(c.read(p), b"new")
        with self.assertRaises(RuntimeError):
            with c.open(p, "wb") as f:
                f.write(b"half")
                raise RuntimeError("cut short")
        self.assertEqual(c.read(p), b"new")
        with self.assertRaises(FileNotFoundError):
            c.open(f"{self.d}/no-such-dir/f", "wb")

    def test_threads_share_a_client(self):
        c, d = self.c, self.d
        blobs = {f"{d}/t{i}": os.urandom(300_000 + i) for i in range(8)}
        for p, b in blobs.items():
            c.write(p, b)
        results = {}

        def reader(p):
            results[p] = c.read(p)

        threads = [threading.Thread(target=reader, args=(p,)) for p in blobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results, blobs)
        self.assertEqual(c.read_many(list(blobs)), list(blobs.values()))
        with self.assertRaises(FileNotFoundError):
            c.read_many([next(iter(blobs)), f"{d}/missing"])

    def test_fork_safety_under_a_process_pool(self):
        c, d = self.c, self.d
        paths = []
        for i in range(8):
            p = f"{d}/fork{i}"
            c.write(p, bytes([i]) * (100_000 + i))
            paths.append(p)
        c.read(paths[0])  # the parent is connected before forking
        parent_pid = os.getpid()
        global _INHERITED
        _INHERITED = c
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(4) as pool:
            # A child on its parent's connection hangs (its runtime has no threads): bounded.
            got = pool.map_async(_child_read, paths * 2).get(timeout=float(os.environ.get("TROVE_TEST_FORK_TIMEOUT_S", "60")))
        for (pid, connected, n, head), i in zip(got, list(range(8)) * 2):
            self.assertNotEqual(pid, parent_pid)
            self.assertEqual(connected, pid, "a forked child must use its own connection")
            self.assertEqual((n, head), (100_000 + i, bytes([i]) * 16))
        # The parent's connection still works after its children used theirs.
        self.assertEqual(c.connected_pid(), parent_pid)
        self.assertEqual(len(c.read(paths[3])), 100_003)
        # A file opened before the fork reads in the child by reopening; one being written
        # is refused there.
        f = c.open(paths[5])
        w = c.open(f"{d}/fork-w", "wb")
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            ok = f.read(3) == bytes([5]) * 3
            try:
                w.write(b"x")
                ok = False
            except OSError:
                pass
            os.write(wfd, b"1" if ok else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        self.assertEqual(os.read(r, 1), b"1")
        self.assertEqual(f.read(2), bytes([5]) * 2)
        w.write(b"parent")
        w.close()
        self.assertEqual(c.read(f"{d}/fork-w"), b"parent")

    def test_many_forks_of_a_busy_client(self):
        # Each child of a parent whose runtime has just worked reads through the client it
        # inherited. The parent's idle runtime threads must leave nothing a child's own threads
        # trip over: with tokio's `parking_lot` feature, 23 of 200 such children crashed (a
        # segfault in parking_lot's park, an abort in malloc).
        c, d = client(), self.d
        p = f"{d}/forked-many"
        want = os.urandom(300_000)
        with c.open(p, "wb") as f:
            f.write(want)
        outcomes = {}
        for _ in range(200):
            c.read(p)
            pid = os.fork()
            if pid == 0:
                signal.alarm(20)  # a child that hangs dies of SIGALRM
                try:
                    os._exit(0 if c.read(p) == want else 3)
                except BaseException:
                    os._exit(4)
            _, status = os.waitpid(pid, 0)
            what = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
            outcomes[what] = outcomes.get(what, 0) + 1
        self.assertEqual(outcomes, {"exit 0": 200}, "forked children that read through an inherited client")

    def test_pickled_client_reconnects(self):
        import pickle

        c2 = pickle.loads(pickle.dumps(self.c))
        self.assertEqual(c2.cluster, self.c.cluster)
        self.assertTrue(c2.exists(self.d))

    def test_bad_cluster_is_a_clear_error(self):
        with self.assertRaises(ValueError):
            trove.Client("not-an-address")
        with self.assertRaises(OSError):
            trove.Client("127.0.0.1:1")


class Fsspec(unittest.TestCase):
    def test_pandas_and_pyarrow_read_parquet_on_trove(self):
        import fsspec
        import pandas as pd
        import pyarrow.parquet as pq

        d = fresh_dir("fsspec")
        url = f"trove:/{d}/table.parquet"
        df = pd.DataFrame({"id": np.arange(50_000), "x": np.random.default_rng(3).random(50_000), "s": [f"r{i}" for i in range(50_000)]})
        df.to_parquet(url)  # written through fsspec's trove:// file system
        back = pd.read_parquet(url)
        pd.testing.assert_frame_equal(back, df)
        fs = fsspec.filesystem("trove")
        table = pq.read_table(f"{d}/table.parquet", filesystem=fs)
        self.assertEqual(table.num_rows, 50_000)
        self.assertEqual(table.column("s")[49_999].as_py(), "r49999")
        self.assertEqual(fs.info(url)["size"], client().stat(f"{d}/table.parquet")["size"])
        self.assertEqual([e.rsplit("/", 1)[1] for e in fs.ls(f"trove:/{d}", detail=False)], ["table.parquet"])
        with fsspec.open(f"trove:/{d}/note.txt", "wb") as f:
            f.write(b"hello fsspec")
        with fsspec.open(f"trove:/{d}/note.txt", "rb") as f:
            f.seek(6)
            self.assertEqual(f.read(), b"fsspec")
        self.assertEqual(fs.cat_file(f"{d}/note.txt", start=-6), b"fsspec")
        pd.DataFrame({"a": [1, 2]}).to_csv(f"trove:/{d}/t.csv", index=False)
        self.assertEqual(pd.read_csv(f"trove:/{d}/t.csv")["a"].tolist(), [1, 2])
        fs.mv(f"{d}/t.csv", f"{d}/u.csv")
        fs.rm(f"{d}/u.csv")
        self.assertFalse(fs.exists(f"{d}/u.csv"))
        self.assertIs(type(fsspec.filesystem("trove")).__name__, "TroveFileSystem")


if __name__ == "__main__":
    unittest.main()

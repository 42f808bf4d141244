#!/usr/bin/env python3
"""Trove's POSIX test suite: the file-system semantics training jobs and ordinary tools rely
on, checked through system calls in one directory.

It runs against any directory, so the same checks run against a Trove mount and against a
local directory, and the two result sets are compared (crates/e2e/tests/mount.rs does both).
Each check returns an *observation* chosen to be independent of the file system (errno names,
contents, link counts; never inode numbers, st_blocks or directory sizes) and raises Fail when
a POSIX rule is broken.

Usage: posix_suite.py DIR [--only NAME,...] [--big-dir-entries N]
Prints one JSON object: {check: {"ok": bool, "observed": ..., "error": str, "seconds": float}}.
"""

import ctypes
import errno
import fcntl
import hashlib
import json
import mmap
import os
import random
import stat
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

CHECKS = []
GIB = 1 << 30
MIB = 1 << 20
AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
# An unprivileged identity for the permission checks (nobody/nogroup on Debian).
NOBODY = 65534


def check(fn):
    CHECKS.append(fn)
    return fn


class Fail(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Fail(msg)


def err(fn, *args, **kw):
    """The errno name fn(*args) fails with, or "ok"."""
    try:
        fn(*args, **kw)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def write_file(path, data, mode=0o644):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def append_file(path, data):
    with open(path, "ab") as f:
        f.write(data)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def pread_all(fd, n, off):
    out = b""
    while len(out) < n:
        chunk = os.pread(fd, n - len(out), off + len(out))
        if not chunk:
            break
        out += chunk
    return out


_libc = ctypes.CDLL(None, use_errno=True)


def renameat2(src, dst, flags):
    if _libc.renameat2(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst), ctypes.c_uint(flags)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


@check
def open_creat_excl_trunc_append(d):
    p = os.path.join(d, "f")
    obs = {}
    obs["open_missing"] = err(os.open, p, os.O_RDONLY)
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, b"hello world")
    os.close(fd)
    obs["excl_existing"] = err(os.open, p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)  # O_CREAT on an existing file opens it
    os.write(fd, b"HE")
    os.close(fd)
    expect(read_file(p) == b"HEllo world", f"O_CREAT reopen overwrote wrongly: {read_file(p)!r}")
    fd = os.open(p, os.O_RDONLY)
    obs["write_on_rdonly"] = err(os.write, fd, b"x")
    os.close(fd)
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    expect(os.fstat(fd).st_size == 0, "O_TRUNC left data")
    os.write(fd, b"abc")
    os.close(fd)
    a = os.open(p, os.O_WRONLY | os.O_APPEND)
    b = os.open(p, os.O_WRONLY | os.O_APPEND)
    for fd, piece in [(a, b"1"), (b, b"2"), (a, b"3"), (b, b"4")]:
        os.write(fd, piece)
    os.close(a)
    os.close(b)
    expect(read_file(p) == b"abc1234", f"O_APPEND writes interleaved wrongly: {read_file(p)!r}")
    # O_APPEND ignores the offset of pwrite's position for write(2) after lseek.
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"5")
    os.close(fd)
    expect(read_file(p) == b"abc12345", f"O_APPEND after lseek: {read_file(p)!r}")
    obs["open_dir_for_write"] = err(os.open, d, os.O_WRONLY)
    obs["content"] = read_file(p).decode()
    return obs


@check
def truncate_and_ftruncate(d):
    p = os.path.join(d, "t")
    data = bytes(range(256)) * 40  # 10240 bytes
    write_file(p, data)
    os.truncate(p, 5000)
    expect(os.stat(p).st_size == 5000, "truncate did not shrink")
    expect(read_file(p) == data[:5000], "shrunk content differs")
    os.truncate(p, 20000)
    got = read_file(p)
    expect(got[:5000] == data[:5000] and got[5000:] == bytes(15000), "extension is not zero-filled")
    # ftruncate while writes are still buffered in the open file.
    fd = os.open(os.path.join(d, "u"), os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, b"A" * 100)
    os.ftruncate(fd, 50)
    os.pwrite(fd, b"Z", 200)
    expect(os.fstat(fd).st_size == 201, f"size after ftruncate+pwrite: {os.fstat(fd).st_size}")
    got = pread_all(fd, 300, 0)
    os.close(fd)
    expect(got == b"A" * 50 + bytes(150) + b"Z", "ftruncate then extension content differs")
    expect(read_file(os.path.join(d, "u")) == got, "content after close differs")
    return {"sizes": [5000, 20000, 201]}


@check
def sparse_and_over_4gib(d):
    p = os.path.join(d, "sparse")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    os.pwrite(fd, b"end", 5 * GIB)
    os.pwrite(fd, b"ABCD", 4 * GIB - 2)  # straddles the 4 GiB line
    os.close(fd)
    st = os.stat(p)
    expect(st.st_size == 5 * GIB + 3, f"size {st.st_size}")
    fd = os.open(p, os.O_RDONLY)
    obs = {
        "tail": pread_all(fd, 3, 5 * GIB).decode(),
        "straddle": pread_all(fd, 4, 4 * GIB - 2).decode(),
        "hole_is_zero": pread_all(fd, 65536, GIB) == bytes(65536),
        "past_end": len(os.pread(fd, 10, 6 * GIB)),
    }
    os.close(fd)
    expect(obs["tail"] == "end" and obs["straddle"] == "ABCD" and obs["hole_is_zero"], f"sparse reads: {obs}")
    return obs


@check
def unlink_open_file(d):
    p = os.path.join(d, "open-unlinked")
    data = os.urandom(9 * MIB + 17)  # several chunks, part of them unflushed
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, data[: 5 * MIB])
    os.fsync(fd)
    os.write(fd, data[5 * MIB :])
    os.unlink(p)
    obs = {"exists_after_unlink": os.path.exists(p), "nlink": os.fstat(fd).st_nlink, "listed": "open-unlinked" in os.listdir(d)}
    expect(pread_all(fd, len(data), 0) == data, "data of an unlinked open file changed")
    os.pwrite(fd, b"more", len(data))
    expect(pread_all(fd, 4, len(data)) == b"more", "write after unlink lost")
    os.close(fd)
    # Replacing an open file by rename keeps the old content readable through the open handle.
    old, new = os.path.join(d, "victim"), os.path.join(d, "newcomer")
    write_file(old, b"old content")
    write_file(new, b"new content")
    fd = os.open(old, os.O_RDONLY)
    os.rename(new, old)
    obs["replaced_open_reads"] = os.pread(fd, 100, 0).decode()
    os.close(fd)
    obs["path_reads"] = read_file(old).decode()
    expect(obs["replaced_open_reads"] == "old content", "an open file replaced by rename changed")
    expect(not obs["exists_after_unlink"] and obs["nlink"] == 0 and not obs["listed"], f"unlink: {obs}")
    return obs


@check
def read_only_closes_beside_writes(d):
    """Descriptors only read, closed while another descriptor of the file has writes not yet
    published, and many opens and closes of one file at once: no close loses or publishes
    half of anything, and every read sees the whole file."""
    p = os.path.join(d, "shared-closes")
    first, second = os.urandom(3 * MIB + 5), os.urandom(2 * MIB + 9)
    w = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    os.write(w, first)
    r = os.open(p, os.O_RDONLY)
    obs = {"reader_sees_unflushed": pread_all(r, len(first), 0) == first}
    os.close(r)
    os.write(w, second)
    os.close(os.open(p, os.O_RDONLY))  # opened and closed unread, the writes still unflushed
    obs["size_before_close"] = os.fstat(w).st_size
    os.close(w)
    obs["whole_after_close"] = read_file(p) == first + second

    def reader(_):
        ok = 0
        for _ in range(40):
            fd = os.open(p, os.O_RDONLY)
            try:
                ok += pread_all(fd, len(first) + len(second) + 1, 0) == first + second
            finally:
                os.close(fd)
        return ok

    with ThreadPoolExecutor(max_workers=4) as pool:
        obs["concurrent_whole_reads"] = sum(pool.map(reader, range(4)))
    # The last read-only close of a file unlinked while open deletes it for good.
    fd = os.open(p, os.O_RDONLY)
    os.unlink(p)
    obs["unlinked_open_reads"] = pread_all(fd, 16, 0) == first[:16]
    os.close(fd)
    obs["listed_after_last_close"] = "shared-closes" in os.listdir(d)
    expect(obs["reader_sees_unflushed"] and obs["whole_after_close"], f"read-only closes beside writes: {obs}")
    expect(obs["concurrent_whole_reads"] == 160, f"concurrent opens and closes: {obs}")
    return obs


@check
def rename_semantics(d):
    j = lambda *p: os.path.join(d, *p)
    write_file(j("a"), b"A")
    write_file(j("b"), b"B")
    os.rename(j("a"), j("b"))
    obs = {"replace": read_file(j("b")).decode(), "src_gone": not os.path.exists(j("a"))}
    os.mkdir(j("d1"))
    os.mkdir(j("d2"))
    os.mkdir(j("full"))
    write_file(j("full", "x"), b"x")
    obs["dir_over_empty_dir"] = err(os.rename, j("d1"), j("d2"))
    obs["dir_over_nonempty_dir"] = err(os.rename, j("d2"), j("full"))
    obs["file_over_dir"] = err(os.rename, j("b"), j("full"))
    obs["dir_over_file"] = err(os.rename, j("full"), j("b"))
    os.mkdir(j("d2", "sub"))
    obs["dir_into_itself"] = err(os.rename, j("d2"), j("d2", "sub", "inner"))
    obs["same_name"] = err(os.rename, j("b"), j("b"))
    obs["missing_source"] = err(os.rename, j("nothing"), j("b2"))
    write_file(j("c"), b"C")
    obs["noreplace_existing"] = err(renameat2, j("c"), j("b"), RENAME_NOREPLACE)
    obs["noreplace_new"] = err(renameat2, j("c"), j("c2"), RENAME_NOREPLACE)
    obs["exchange"] = err(renameat2, j("c2"), j("b"), RENAME_EXCHANGE)
    obs["after_exchange"] = [read_file(j("b")).decode(), read_file(j("c2")).decode()]
    obs["exchange_missing"] = err(renameat2, j("c2"), j("nothing"), RENAME_EXCHANGE)
    obs["exchange_file_dir"] = err(renameat2, j("c2"), j("full"), RENAME_EXCHANGE)
    obs["after_file_dir_exchange"] = [os.path.isdir(j("c2")), os.path.isfile(j("full"))]
    # Renaming one hard link onto another link of the same inode changes nothing.
    os.link(j("b"), j("b-link"))
    obs["onto_own_link"] = err(os.rename, j("b"), j("b-link"))
    obs["links_after"] = sorted(n for n in os.listdir(d) if n.startswith("b"))
    # Moving across directories keeps content and the directory link counts right.
    os.mkdir(j("m"))
    os.rename(j("d2", "sub"), j("m", "sub"))
    obs["nlinks_after_move"] = [os.stat(j("d2")).st_nlink, os.stat(j("m")).st_nlink]
    expect(obs["replace"] == "A" and obs["src_gone"], f"rename did not replace: {obs}")
    expect(obs["after_exchange"] == ["C", "A"], f"exchange swapped wrongly: {obs['after_exchange']}")
    return obs


@check
def hard_links(d):
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    write_file(a, b"first")
    os.link(a, b)
    obs = {"nlink": [os.stat(a).st_nlink, os.stat(b).st_nlink], "same_inode": os.stat(a).st_ino == os.stat(b).st_ino}
    write_file(b, b"second")
    obs["shared_content"] = read_file(a).decode()
    os.unlink(a)
    obs["nlink_after_unlink"] = os.stat(b).st_nlink
    obs["link_dir"] = err(os.link, d, os.path.join(d, "dirlink"))
    write_file(a, b"x")
    obs["link_onto_existing"] = err(os.link, a, b)
    expect(obs["nlink"] == [2, 2] and obs["same_inode"] and obs["shared_content"] == "second", f"links: {obs}")
    return obs


@check
def symlinks(d):
    j = lambda *p: os.path.join(d, *p)
    write_file(j("target"), b"via link")
    os.symlink("target", j("link"))
    obs = {
        "readlink": os.readlink(j("link")),
        "lstat_is_link": stat.S_ISLNK(os.lstat(j("link")).st_mode),
        "stat_follows": stat.S_ISREG(os.stat(j("link")).st_mode),
        "read_through": read_file(j("link")).decode(),
    }
    os.symlink("missing", j("dangling"))
    obs["dangling_stat"] = err(os.stat, j("dangling"))
    obs["dangling_lstat"] = err(os.lstat, j("dangling"))
    os.mkdir(j("dir"))
    write_file(j("dir", "inside"), b"")
    os.symlink("dir", j("dirlink"))
    obs["list_through"] = os.listdir(j("dirlink"))
    os.symlink("loop2", j("loop1"))
    os.symlink("loop1", j("loop2"))
    obs["loop"] = err(os.stat, j("loop1"))
    long_target = "x" * 1000
    os.symlink(long_target, j("long"))
    obs["long_target_kept"] = os.readlink(j("long")) == long_target
    obs["symlink_exists"] = err(os.symlink, "t", j("target"))
    expect(obs["read_through"] == "via link" and obs["lstat_is_link"], f"symlinks: {obs}")
    return obs


@check
def chmod_chown_utimens(d):
    p = os.path.join(d, "f")
    write_file(p, b"x")
    os.chmod(p, 0o640)
    obs = {"mode": oct(stat.S_IMODE(os.stat(p).st_mode))}
    os.chmod(p, 0o4755)
    obs["setuid_mode"] = oct(stat.S_IMODE(os.stat(p).st_mode))
    if os.geteuid() == 0:
        os.chown(p, 1234, 5678)
        st = os.stat(p)
        obs["owner"] = [st.st_uid, st.st_gid]
    else:
        obs["owner"] = "skipped (not root)"
    atime_ns, mtime_ns = 1_600_000_000_123_456_789, 1_650_000_000_987_654_321
    os.utime(p, ns=(atime_ns, mtime_ns))
    st = os.stat(p)
    obs["times_ns"] = [st.st_atime_ns, st.st_mtime_ns]
    before = time.time()
    os.utime(p, None)
    obs["utime_now"] = abs(os.stat(p).st_mtime - before) < 5
    old_mtime = os.stat(p).st_mtime_ns
    time.sleep(0.02)
    with open(p, "ab") as f:
        f.write(b"more")
    obs["write_moves_mtime"] = os.stat(p).st_mtime_ns > old_mtime
    old_ctime = os.stat(p).st_ctime_ns
    time.sleep(0.02)
    os.chmod(p, 0o600)
    obs["chmod_moves_ctime"] = os.stat(p).st_ctime_ns > old_ctime
    dir_mtime = os.stat(d).st_mtime_ns
    time.sleep(0.02)
    write_file(os.path.join(d, "new"), b"")
    obs["create_moves_dir_mtime"] = os.stat(d).st_mtime_ns > dir_mtime
    expect(obs["times_ns"] == [atime_ns, mtime_ns], f"utimens lost precision: {obs['times_ns']}")
    return obs


def as_nobody(fn):
    """Runs fn() in a child process as uid/gid NOBODY; returns its JSON-able result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = json.dumps(fn()).encode()
        except BaseException as e:  # report, never fall back into the parent's code
            out = json.dumps({"child_error": repr(e)}).encode()
        os.write(w, out)
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


@check
def permissions_enforced(d):
    if os.geteuid() != 0:
        return "skipped (not root)"
    j = lambda *p: os.path.join(d, *p)
    os.chmod(d, 0o755)
    write_file(j("secret"), b"root only", 0o600)
    os.chmod(j("secret"), 0o600)
    os.mkdir(j("closed"), 0o755)
    os.mkdir(j("open"))
    os.chmod(j("open"), 0o777)
    os.mkdir(j("sticky"))
    os.chmod(j("sticky"), 0o1777)
    write_file(j("sticky", "roots"), b"")
    os.mkdir(j("sgid"))
    os.chown(j("sgid"), 0, 4321)
    os.chmod(j("sgid"), 0o2777)
    write_file(j("readable"), b"public", 0o644)
    os.chmod(j("readable"), 0o644)

    def probe():
        out = {
            "read_0600": err(os.open, j("secret"), os.O_RDONLY),
            "read_0644": read_file(j("readable")).decode(),
            "write_0644": err(os.open, j("readable"), os.O_WRONLY),
            "create_in_0755": err(os.open, j("closed", "x"), os.O_CREAT | os.O_WRONLY, 0o644),
            "chmod_others": err(os.chmod, j("readable"), 0o777),
            "unlink_in_sticky": err(os.unlink, j("sticky", "roots")),
        }
        fd = os.open(j("open", "mine"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.close(fd)
        st = os.stat(j("open", "mine"))
        out["new_file_owner"] = [st.st_uid, st.st_gid]
        out["chown_to_root"] = err(os.chown, j("open", "mine"), 0, 0)
        fd = os.open(j("sgid", "f"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.close(fd)
        os.mkdir(j("sgid", "sub"), 0o755)
        out["sgid_file_gid"] = os.stat(j("sgid", "f")).st_gid
        sub = os.stat(j("sgid", "sub"))
        out["sgid_subdir"] = [sub.st_gid, bool(sub.st_mode & stat.S_ISGID)]
        out["access_w_0644"] = os.access(j("readable"), os.W_OK)
        return out

    obs = as_nobody(probe)
    expect(obs.get("read_0600") == "EACCES", f"a 0600 root file was readable by nobody: {obs}")
    return obs


@check
def xattrs(d):
    p = os.path.join(d, "f")
    write_file(p, b"")
    os.setxattr(p, "user.a", b"1")
    obs = {"get": os.getxattr(p, "user.a").decode(), "listed": "user.a" in os.listxattr(p)}
    obs["create_existing"] = err(os.setxattr, p, "user.a", b"2", os.XATTR_CREATE)
    obs["replace_missing"] = err(os.setxattr, p, "user.b", b"2", os.XATTR_REPLACE)
    os.setxattr(p, "user.a", b"3", os.XATTR_REPLACE)
    obs["replaced"] = os.getxattr(p, "user.a").decode()
    big = os.urandom(4000)
    os.setxattr(p, "user.big", big)
    obs["big_round_trip"] = os.getxattr(p, "user.big") == big
    os.removexattr(p, "user.a")
    obs["after_remove"] = err(os.getxattr, p, "user.a")
    obs["remove_missing"] = err(os.removexattr, p, "user.a")
    obs["missing"] = err(os.getxattr, p, "user.none")
    os.setxattr(d, "user.on_dir", b"d")
    obs["dir"] = os.getxattr(d, "user.on_dir").decode()
    expect(obs["get"] == "1" and obs["replaced"] == "3" and obs["big_round_trip"], f"xattrs: {obs}")
    return obs


@check
def statfs(d):
    s = os.statvfs(d)
    expect(s.f_blocks > 0 and s.f_bsize > 0, f"statfs reports no capacity: {s}")
    expect(s.f_bavail <= s.f_blocks and s.f_bfree <= s.f_blocks, f"statfs free > total: {s}")
    expect(s.f_namemax >= 255, f"name limit {s.f_namemax}")
    return {"capacity_reported": True}


@check
def fsync_fdatasync(d):
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, b"durable")
    obs = {"fsync": err(os.fsync, fd), "fdatasync": err(os.fdatasync, fd)}
    os.close(fd)
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    obs["dir_fsync"] = err(os.fsync, dfd)
    os.close(dfd)
    expect(read_file(p) == b"durable", "content after fsync")
    return obs


@check
def fifos(d):
    p = os.path.join(d, "fifo")
    os.mkfifo(p, 0o644)
    os.mknod(os.path.join(d, "fifo2"), stat.S_IFIFO | 0o600)
    obs = {"is_fifo": [stat.S_ISFIFO(os.stat(p).st_mode), stat.S_ISFIFO(os.stat(os.path.join(d, "fifo2")).st_mode)]}
    rfd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open(p, os.O_WRONLY)
    os.write(wfd, b"ping")
    obs["through_fifo"] = os.read(rfd, 10).decode()
    os.close(wfd)
    os.close(rfd)
    obs["size"] = os.stat(p).st_size
    expect(obs["through_fifo"] == "ping", f"fifo: {obs}")
    return obs


@check
def errors(d):
    j = lambda *p: os.path.join(d, *p)
    os.mkdir(j("dir"))
    write_file(j("dir", "x"), b"")
    write_file(j("file"), b"")
    return {
        "mkdir_existing": err(os.mkdir, j("dir")),
        "rmdir_nonempty": err(os.rmdir, j("dir")),
        "rmdir_file": err(os.rmdir, j("file")),
        "unlink_dir": err(os.unlink, j("dir")),
        "under_file": err(os.open, j("file", "x"), os.O_RDONLY),
        "name_256": err(os.open, j("n" * 256), os.O_CREAT | os.O_WRONLY, 0o644),
        "name_255": err(lambda: os.close(os.open(j("n" * 255), os.O_CREAT | os.O_WRONLY, 0o644))),
        "lstat_missing": err(os.lstat, j("missing")),
        "mkdir_in_missing": err(os.mkdir, j("missing", "sub")),
        "rmdir_dot": err(os.rmdir, j("dir", ".")),
    }


@check
def same_mount_sees_unflushed_writes(d):
    p = os.path.join(d, "f")
    w = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(w, b"abc")
    r = os.open(p, os.O_RDONLY)
    obs = {"size": os.fstat(r).st_size, "stat_size": os.stat(p).st_size, "read": os.read(r, 10).decode()}
    os.write(w, b"def")
    obs["read_more"] = os.pread(r, 10, 0).decode()
    os.close(w)
    os.close(r)
    expect(obs["read"] == "abc" and obs["read_more"] == "abcdef", f"second descriptor: {obs}")
    return obs


@check
def mmap_read_write(d):
    p = os.path.join(d, "m")
    data = bytearray(os.urandom(MIB + 100))
    write_file(p, bytes(data))
    with open(p, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        expect(m[:] == bytes(data), "mmap read differs")
        m[10:20] = b"0123456789"
        m[MIB : MIB + 5] = b"abcde"
        m.flush()
        m.close()
    data[10:20] = b"0123456789"
    data[MIB : MIB + 5] = b"abcde"
    expect(read_file(p) == bytes(data), "mmap writes not in the file")
    return {"ok": True}


@check
def dir_link_counts(d):
    a = os.path.join(d, "a")
    os.mkdir(a)
    counts = [os.stat(a).st_nlink]
    os.mkdir(os.path.join(a, "b"))
    os.mkdir(os.path.join(a, "c"))
    write_file(os.path.join(a, "f"), b"")
    counts.append(os.stat(a).st_nlink)
    os.rmdir(os.path.join(a, "b"))
    counts.append(os.stat(a).st_nlink)
    return counts


@check
def dir_times_follow_changes(d):
    """Every entry change moves the directory's mtime and ctime, and stat shows it at once."""
    a = os.path.join(d, "a")
    os.mkdir(a)
    j = lambda n: os.path.join(a, n)
    steps = []

    def changed(what, fn):
        before = os.stat(a)
        time.sleep(0.02)
        fn()
        after = os.stat(a)
        expect(after.st_mtime_ns > before.st_mtime_ns, f"{what}: directory mtime did not move")
        expect(after.st_ctime_ns > before.st_ctime_ns, f"{what}: directory ctime did not move")
        steps.append([what, after.st_nlink - before.st_nlink])

    changed("create", lambda: write_file(j("f"), b""))
    changed("mkdir", lambda: os.mkdir(j("s")))
    changed("symlink", lambda: os.symlink("f", j("l")))
    changed("link", lambda: os.link(j("f"), j("g")))
    changed("rename within", lambda: os.rename(j("g"), j("h")))
    changed("mkfifo", lambda: os.mkfifo(j("p")))
    changed("unlink", lambda: os.unlink(j("h")))
    changed("rmdir", lambda: os.rmdir(j("s")))
    changed("rename out", lambda: os.rename(j("f"), os.path.join(d, "f")))
    return steps


@check
def changes_show_through_names_looked_up_later(d):
    """A change made through one name of a file shows at once through another name looked up
    after it, also when many names of the directory are looked up after their entries expired
    (a Trove mount then answers LOOKUPs from a listing fetched ahead)."""
    j = lambda n: os.path.join(d, n)
    changes = {
        "append": lambda a: append_file(a, b"more bytes"),
        "truncate": lambda a: os.truncate(a, 3),
        "chmod": lambda a: os.chmod(a, 0o600),
        "link": lambda a: os.link(a, a + ".3"),
        "unlink": lambda a: os.unlink(a),
        "rename": lambda a: os.rename(a, a + ".moved"),
    }
    for k in changes:
        for i in range(12):
            write_file(j(f"{k}.p{i}"), b"p")
        write_file(j(f"{k}.a"), b"0123456789")
        os.link(j(f"{k}.a"), j(f"{k}.b"))
    for i in range(12):
        write_file(j(f"gone.p{i}"), b"p")
        write_file(j(f"gone.q{i}"), b"q")
    time.sleep(1.5)  # past the entry and attribute timeouts
    seen = {}
    for k, change in changes.items():
        # Names found one after another: a listing of the directory is fetched ahead.
        for i in range(12):
            os.stat(j(f"{k}.p{i}"))
        time.sleep(0.2)
        change(j(f"{k}.a"))
        st = os.stat(j(f"{k}.b"))
        seen[k] = {"size": st.st_size, "nlink": st.st_nlink, "mode": oct(stat.S_IMODE(st.st_mode))}
    expect(seen["append"]["size"] == 20, f"append: {seen['append']}")
    expect(seen["truncate"]["size"] == 3, f"truncate: {seen['truncate']}")
    expect(seen["chmod"]["mode"] == "0o600", f"chmod: {seen['chmod']}")
    expect(seen["link"]["nlink"] == 3, f"link: {seen['link']}")
    expect(seen["unlink"]["nlink"] == 1, f"unlink: {seen['unlink']}")
    expect(seen["rename"]["nlink"] == 2, f"rename: {seen['rename']}")
    # Names unlinked here are gone at once, also when the listing fetched ahead still had them.
    for i in range(12):
        os.stat(j(f"gone.p{i}"))
    time.sleep(0.2)
    for i in range(12):
        os.unlink(j(f"gone.q{i}"))
    gone = [err(os.stat, j(f"gone.q{i}")) for i in range(12)]
    expect(gone == ["ENOENT"] * 12, f"unlinked names: {gone}")
    return seen


@check
def readdir_contents_and_types(d):
    j = lambda *p: os.path.join(d, *p)
    for n in ["c", "a", "b"]:
        write_file(j(n), b"")
    os.mkdir(j("dir"))
    os.symlink("a", j("link"))
    os.mkfifo(j("pipe"))
    kinds = {}
    with os.scandir(d) as it:
        for e in it:
            kinds[e.name] = "dir" if e.is_dir(follow_symlinks=False) else "link" if e.is_symlink() else "file" if e.is_file(follow_symlinks=False) else "other"
    names = sorted(os.listdir(d))
    expect(names == ["a", "b", "c", "dir", "link", "pipe"], f"listing: {names}")
    return {"names": names, "kinds": dict(sorted(kinds.items()))}


@check
def large_file_unaligned_io(d):
    p = os.path.join(d, "big")
    rng = random.Random(7)
    data = rng.randbytes(10 * MIB + 123)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    pos = 0
    while pos < len(data):
        n = rng.randint(1, 300_000)
        os.write(fd, data[pos : pos + n])
        pos += n
    os.close(fd)
    expect(hashlib.sha256(read_file(p)).hexdigest() == hashlib.sha256(data).hexdigest(), "written content differs")
    # Overwrite a range in the middle (across a chunk boundary) and read it back piecewise.
    patch = rng.randbytes(3 * MIB)
    fd = os.open(p, os.O_WRONLY)
    os.pwrite(fd, patch, 3 * MIB + 5)
    os.close(fd)
    data = data[: 3 * MIB + 5] + patch + data[6 * MIB + 5 :]
    fd = os.open(p, os.O_RDONLY)
    got, pos = b"", 0
    while True:
        chunk = os.pread(fd, rng.randint(1, 1_000_000), pos)
        if not chunk:
            break
        got += chunk
        pos += len(chunk)
    os.close(fd)
    expect(got == data, "piecewise read after overwrite differs")
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@check
def locks_between_processes(d):
    """fcntl and flock locks exclude another process. Each kind on its own file: a Trove mount
    keeps flock locks as whole-file byte-range locks (as the Linux NFS client does), so one
    process mixing both kinds on one file would wait for itself there, unlike on a local disk."""
    pf, pl = os.path.join(d, "fcntl-lock"), os.path.join(d, "flock-lock")
    write_file(pf, b"")
    write_file(pl, b"")
    ffd = os.open(pf, os.O_RDWR)
    lfd = os.open(pl, os.O_RDWR)
    fcntl.lockf(ffd, fcntl.LOCK_EX)
    fcntl.flock(lfd, fcntl.LOCK_EX)

    def other():
        a, b = os.open(pf, os.O_RDWR), os.open(pl, os.O_RDWR)
        out = {
            "fcntl": err(fcntl.lockf, a, fcntl.LOCK_EX | fcntl.LOCK_NB),
            "fcntl_shared": err(fcntl.lockf, a, fcntl.LOCK_SH | fcntl.LOCK_NB),
            "fcntl_other_bytes": err(fcntl.lockf, a, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 1000),
            "flock": err(fcntl.flock, b, fcntl.LOCK_EX | fcntl.LOCK_NB),
        }
        os.close(a)
        os.close(b)
        return out

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = json.dumps(other()).encode()
        except BaseException as e:
            out = json.dumps({"child_error": repr(e)}).encode()
        os.write(w, out)
        os._exit(0)
    os.close(w)
    held = json.loads(os.read(r, 65536))
    os.close(r)
    os.waitpid(pid, 0)
    results = {"while_held": held}
    os.close(ffd)  # closing releases the process's fcntl locks on the file
    fcntl.flock(lfd, fcntl.LOCK_UN)
    os.close(lfd)
    fd = os.open(pf, os.O_RDWR)
    results["fcntl_after_close"] = err(fcntl.lockf, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)
    fd = os.open(pl, os.O_RDWR)
    results["flock_after_unlock"] = err(fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)
    expect(held.get("fcntl") in ("EAGAIN", "EACCES") and held.get("flock") == "EAGAIN", f"locks: {results}")
    return results


@check
def big_directory(d, entries=100_000):
    """Creates `entries` files in one directory with 8 threads, then lists them."""
    names = [f"entry-{i:06d}" for i in range(entries)]
    errors = []

    def make(part):
        try:
            for n in part:
                os.close(os.open(os.path.join(d, n), os.O_CREAT | os.O_WRONLY, 0o644))
        except OSError as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=make, args=(names[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(not errors, f"creating entries failed: {errors[:3]}")
    listed = os.listdir(d)
    expect(len(listed) == entries, f"listed {len(listed)} of {entries} entries")
    expect(sorted(listed) == names, "listing differs from the created names")
    # Remove a few and list again: the listing must follow.
    for n in names[:10]:
        os.unlink(os.path.join(d, n))
    with os.scandir(d) as it:
        count = sum(1 for e in it if e.is_file())
    expect(count == entries - 10, f"after removing 10: {count}")
    return {"entries": entries, "after_remove": count}


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    root = args[0]
    only = None
    big = 100_000
    i = 1
    while i < len(args):
        if args[i] == "--only":
            only = set(args[i + 1].split(","))
            i += 2
        elif args[i] == "--big-dir-entries":
            big = int(args[i + 1])
            i += 2
        else:
            print(f"unknown argument {args[i]!r}", file=sys.stderr)
            sys.exit(2)
    os.umask(0o022)
    results = {}
    for fn in CHECKS:
        name = fn.__name__
        if only and name not in only:
            continue
        d = os.path.join(root, name)
        os.mkdir(d)
        started = time.monotonic()
        try:
            observed = fn(d, big) if name == "big_directory" else fn(d)
            results[name] = {"ok": True, "observed": observed, "error": ""}
        except Fail as e:
            results[name] = {"ok": False, "observed": None, "error": str(e)}
        except Exception as e:  # an unexpected errno is a failure of the check, not of the suite
            results[name] = {"ok": False, "observed": None, "error": repr(e)}
        results[name]["seconds"] = round(time.monotonic() - started, 3)
        print(f"{name}: {'ok' if results[name]['ok'] else 'FAIL ' + results[name]['error']} ({results[name]['seconds']} s)", file=sys.stderr)
    print(json.dumps(results, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()

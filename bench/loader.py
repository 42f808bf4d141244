"""The small-file loader of the side-by-side benchmarks (bench/small-io.sh, bench/loader-ceiling.sh):
one program, so every file system is read the same way.

  loader.py make DIR FILES KIB          writes FILES files of KIB KiB (random bytes), 4 processes
  loader.py read DIR FILES SECONDS KIB  4 processes each open, read whole (1 MiB reads) and close
                                        files picked at random (every file at most once), for at
                                        most SECONDS; prints files/s and MB/s
  loader.py time DIR FILES KIB [MOUNT]  one process reads the FILES files the same way, and
                                        prints the mean time of an open, of reading the file
                                        whole and of a close; with MOUNT (a Trove mount), also
                                        the mount's and storage nodes' stage totals of the run
                                        (the `trove.stages` extended attribute), per file

A file read back at another length fails the run. LOADER_JOBS in the environment changes the
number of processes (default 4, the shape the side-by-side runs measure).
"""
import os
import random
import sys
import time
from multiprocessing import Pool

JOBS = int(os.environ.get("LOADER_JOBS", "4"))


def name(i):
    return f"f{i:05d}"


def make(args):
    d, n, kib, part = args
    block = os.urandom(kib << 10)
    for i in range(part, n, JOBS):
        fd = os.open(os.path.join(d, name(i)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, block)
        os.close(fd)


def read_whole(fd, n, kib):
    """Reads open file `n` to its end in 1 MiB reads; fails the run at another length."""
    got = 0
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        got += len(b)
    if got != kib << 10:
        raise SystemExit(f"{n}: read {got} bytes, not {kib << 10}")


def read(args):
    d, names, secs, kib = args
    done, start = 0, time.monotonic()
    for n in names:
        fd = os.open(os.path.join(d, n), os.O_RDONLY)
        read_whole(fd, n, kib)
        os.close(fd)
        done += 1
        if time.monotonic() - start >= secs:
            break
    return done, time.monotonic() - start


def stages(mount):
    """The stage totals a Trove mount reports: {(side, stage): (count, total_ns)}."""
    out = {}
    for line in os.getxattr(mount, "trove.stages").decode().splitlines():
        f = line.split()
        if len(f) == 4:
            out[(f[0], f[1])] = (int(f[2]), int(f[3]))
    return out


def time_each(d, n, kib, mount):
    names = [name(i) for i in range(n)]
    random.Random(13).shuffle(names)
    before = stages(mount) if mount else {}
    spent = [0.0, 0.0, 0.0]
    for n_ in names:
        t0 = time.perf_counter()
        fd = os.open(os.path.join(d, n_), os.O_RDONLY)
        t1 = time.perf_counter()
        read_whole(fd, n_, kib)
        t2 = time.perf_counter()
        os.close(fd)
        t3 = time.perf_counter()
        for i, (a, b) in enumerate([(t0, t1), (t1, t2), (t2, t3)]):
            spent[i] += b - a
    us = [round(s / len(names) * 1e6) for s in spent]
    print(f"per file: open {us[0]} us, read {us[1]} us, close {us[2]} us")
    if mount:
        after = stages(mount)
        for key, (count, ns) in sorted(after.items()):
            c0, ns0 = before.get(key, (0, 0))
            if count > c0:
                each = (ns - ns0) / (count - c0) / 1e3
                print(f"  {key[0]:7} {key[1]:26} {(count - c0) / len(names):5.2f} per file  {each:7.1f} us each")


def main(argv):
    if len(argv) == 5 and argv[1] == "make":
        d, n, kib = argv[2], int(argv[3]), int(argv[4])
        with Pool(JOBS) as p:
            p.map(make, [(d, n, kib, part) for part in range(JOBS)])
    elif len(argv) == 6 and argv[1] == "read":
        d, n, secs, kib = argv[2], int(argv[3]), float(argv[4]), int(argv[5])
        names = [name(i) for i in range(n)]
        random.Random(13).shuffle(names)
        with Pool(JOBS) as p:
            parts = p.map(read, [(d, names[job::JOBS], secs, kib) for job in range(JOBS)])
        files = sum(f for f, _ in parts)
        secs = max(s for _, s in parts)
        print(round(files / secs), round(files * (kib << 10) / secs / 1e6, 1))
    elif len(argv) in (5, 6) and argv[1] == "time":
        time_each(argv[2], int(argv[3]), int(argv[4]), argv[5] if len(argv) == 6 else None)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)

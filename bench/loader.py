"""The small-file loader of the side-by-side benchmarks (bench/small-io.sh, bench/loader-ceiling.sh):
one program, so every file system is read the same way.

  loader.py make DIR FILES KIB          writes FILES files of KIB KiB (random bytes), 4 processes
  loader.py read DIR FILES SECONDS KIB  4 processes each open, read whole (1 MiB reads) and close
                                        files picked at random (every file at most once), for at
                                        most SECONDS; prints files/s and MB/s

A file read back at another length fails the run.
"""
import os
import random
import sys
import time
from multiprocessing import Pool

JOBS = 4


def name(i):
    return f"f{i:05d}"


def make(args):
    d, n, kib, part = args
    block = os.urandom(kib << 10)
    for i in range(part, n, JOBS):
        fd = os.open(os.path.join(d, name(i)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, block)
        os.close(fd)


def read(args):
    d, names, secs, kib = args
    done, start = 0, time.monotonic()
    for n in names:
        fd = os.open(os.path.join(d, n), os.O_RDONLY)
        got = 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            got += len(b)
        os.close(fd)
        if got != kib << 10:
            raise SystemExit(f"{n}: read {got} bytes, not {kib << 10}")
        done += 1
        if time.monotonic() - start >= secs:
            break
    return done, time.monotonic() - start


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
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)

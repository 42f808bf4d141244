#!/usr/bin/env python3
"""Takes and tests fcntl/flock locks for the two-mount lock tests.

Usage: lock_probe.py hold PATH fcntl|flock   take an exclusive lock, print "locked", sleep
       lock_probe.py try PATH fcntl|flock    print "granted" or the errno name (non-blocking)
       lock_probe.py wait PATH fcntl|flock   block until granted, print "granted"
"""

import errno
import fcntl
import os
import sys
import time


def take(fd, how, block):
    if how == "fcntl":
        fcntl.lockf(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    elif how == "flock":
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    else:
        raise SystemExit(f"unknown lock kind {how!r}")


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    action, path, how = sys.argv[1:]
    fd = os.open(path, os.O_RDWR)
    if action == "hold":
        take(fd, how, True)
        print("locked", flush=True)
        time.sleep(3600)
    elif action == "try":
        try:
            take(fd, how, False)
            print("granted")
        except OSError as e:
            print(errno.errorcode.get(e.errno, str(e.errno)))
    elif action == "wait":
        take(fd, how, True)
        print("granted", flush=True)
    else:
        raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    main()

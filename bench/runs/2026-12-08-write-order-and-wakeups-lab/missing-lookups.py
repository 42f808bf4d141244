"""`missing-lookups.py DIR N`: stats N names that do not exist in DIR (on a mount: one LOOKUP
and one metadata call each), one at a time; prints the mean time of one."""
import os
import sys
import time

d, n = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
for i in range(n):
    try:
        os.stat(os.path.join(d, "nx%07d_%d" % (i, os.getpid())))
    except FileNotFoundError:
        pass
print("negative lookup %.1f us" % ((time.perf_counter() - t) / n * 1e6))

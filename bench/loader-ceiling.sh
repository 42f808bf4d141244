#!/usr/bin/env bash
# The ceiling a FUSE file system can reach on the small-file loader of bench/small-io.sh, beside
# the local disk, in one run: the same program (bench/loader.py: 4 processes opening, reading
# whole and closing files picked at random from one directory) on
#   - memfs (crates/mount/examples/memfs.rs): a FUSE file system that answers every request on
#     the thread that read it, from memory, reads returning zeros, mounted like `trove mount`;
#   - a directory on the local disk (page cache dropped before each read).
# What memfs reaches is what the kernel's FUSE round trips and copies allow for this shape; the
# distance from there to the Trove mount's row in bench/small-io.sh is Trove's own cost.
#
# Record a run with:  bench/record.sh loader-ceiling bench/loader-ceiling.sh
# Needs root (mounting, drop_caches), python3 and a release build of memfs (cargo build
# --release -p mount --example memfs). Tunables (environment): LOADER_FILES (default 20000),
# LOADER_SECONDS (default 10), SIZES (file sizes in KiB, default "4 128"), WORK (scratch
# directory on the local disk, default /var/tmp/trove-bench-loader-ceiling), MEMFS (the binary).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
memfs=${MEMFS:-$repo/target/release/examples/memfs}
files=${LOADER_FILES:-20000}
seconds=${LOADER_SECONDS:-10}
sizes=${SIZES:-4 128}
work=${WORK:-/var/tmp/trove-bench-loader-ceiling}
[ -x "$memfs" ] || { echo "build first: cargo build --release -p mount --example memfs" >&2; exit 1; }

mkdir -p "$work/memfs" "$work/local"
memfs_pid=""
cleanup() {
    # memfs ends when unmounted.
    umount "$work/memfs" 2>/dev/null || true
    [ -z "$memfs_pid" ] || wait "$memfs_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
"$memfs" "$work/memfs" 2> "$work/memfs.log" &
memfs_pid=$!
for _ in $(seq 100); do grep -q " $work/memfs " /proc/self/mountinfo && break; sleep 0.1; done
grep -q " $work/memfs " /proc/self/mountinfo || { echo "memfs did not mount" >&2; exit 1; }

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "== loader: 4 processes, $files files a directory, each read once, at most $seconds s (load $(load))"
echo "| KiB | target | files/s | MB/s | load before |"
echo "|---|---|---|---|---|"
for kib in $sizes; do
    for t in local memfs; do
        d="$work/$t/d$kib"
        mkdir -p "$d"
        python3 "$here/loader.py" make "$d" "$files" "$kib"
        sync
        echo 3 > /proc/sys/vm/drop_caches
        before=$(load)
        out=$(python3 "$here/loader.py" read "$d" "$files" "$seconds" "$kib")
        echo "| $kib | $t | ${out% *} | ${out#* } | $before |"
        rm -rf "$d"
    done
done

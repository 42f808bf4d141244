#!/usr/bin/env bash
# Where the time of a 4 KiB random read goes: `trove bench io --latency-breakdown` on a local
# 6-node 4+2 cluster, through `trove mount` with O_DIRECT (FUSE, mount, client, wire, storage
# node) and through the native client (no FUSE), one request at a time and four at once on one
# file. The stage totals come from the mount process (a virtual xattr) and every storage node
# (`StorageOp::Stages`), taken before and after each run and divided by its requests.
#
#   bench/record.sh latency-breakdown bench/latency-breakdown.sh
#
# Needs root (mounting, drop_caches) and a release build (cargo build --release -p trove).
# Tunables: FILE_SIZE (default 1G), RUNTIME (seconds per run, default 10), WORK (scratch
# directory, default /var/tmp/trove-bench-breakdown), TROVE (the binary).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
trove=${TROVE:-$here/../target/release/trove}
file_size=${FILE_SIZE:-1G}
runtime=${RUNTIME:-10}
work=${WORK:-/var/tmp/trove-bench-breakdown}
[ -x "$trove" ] || { echo "build first: cargo build --release -p trove" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (mounting, dropping caches)" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work/cluster" "$work/mnt"
mount_pid=""
cleanup() {
    if [ -n "$mount_pid" ]; then kill -TERM "$mount_pid" 2>/dev/null || true; wait "$mount_pid" 2>/dev/null || true; fi
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
"$trove" cluster start --dir "$work/cluster" --nodes 6 --ec 4+2 --scrub-interval-ms 0 >/dev/null
"$trove" mount "$work/cluster" "$work/mnt" 2> "$work/mount.log" &
mount_pid=$!
for _ in $(seq 100); do grep -q " $work/mnt " /proc/self/mountinfo && break; sleep 0.1; done
grep -q " $work/mnt " /proc/self/mountinfo || { cat "$work/mount.log" >&2; exit 1; }

common=(--pattern randread --bs 4k --file-size "$file_size" --files-per-job 1 --runtime "$runtime" --ramp 1 --keep --latency-breakdown --quiet)
echo "== trove mount, O_DIRECT, 1 request at a time"
"$trove" bench io --dir "$work/mnt" --direct --jobs 1 --qd 1 "${common[@]}"
echo "== trove mount, O_DIRECT, 4 requests at once on one file"
"$trove" bench io --dir "$work/mnt" --direct --jobs 1 --qd 4 "${common[@]}"
echo "== native client (no FUSE), 1 request at a time"
"$trove" bench io -c "$work/cluster" --root /native --jobs 1 --qd 1 "${common[@]}"

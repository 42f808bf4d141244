#!/usr/bin/env bash
# Where one small file's time goes when a loader opens, reads and closes it: one process, one
# file at a time (no queueing behind other readers), through `trove mount` on a local 6-node
# 4+2 cluster, next to the same files on the local disk (ext4). For Trove it prints the mean
# open, read and close times and the stage totals of the run per file (the mount's, the
# client's, the transport's and every storage node's, from the mount's `trove.stages`
# extended attribute), in three states:
#   - cold: mount started afresh, page cache dropped (what bench/small-io.sh's loader meets);
#   - storage warm: mount started afresh, the storage nodes' files still in the page cache;
#   - kernel warm: the same mount again, the kernel's page cache kept (no READ reaches it).
# The mount runs without its disk cache, so a read is a fetch from the storage nodes.
#
#   bench/record.sh loader-breakdown bench/loader-breakdown.sh
#
# Needs root (mounting, drop_caches), python3 and a release build (cargo build --release -p
# trove). Tunables: FILES (default 3000), KIB (file size, default 128), WORK (scratch
# directory, default /var/tmp/trove-bench-loader-breakdown), TROVE (the binary).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
trove=${TROVE:-$here/../target/release/trove}
files=${FILES:-3000}
kib=${KIB:-128}
work=${WORK:-/var/tmp/trove-bench-loader-breakdown}
[ -x "$trove" ] || { echo "build first: cargo build --release -p trove" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (mounting, dropping caches)" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work/cluster" "$work/mnt" "$work/ext4"
mount_pid=""
stop_mount() {
    if [ -n "$mount_pid" ]; then kill -TERM "$mount_pid" 2>/dev/null || true; wait "$mount_pid" 2>/dev/null || true; fi
    mount_pid=""
    for _ in $(seq 100); do grep -q " $work/mnt " /proc/self/mountinfo || break; sleep 0.1; done
}
start_mount() {
    "$trove" mount "$work/cluster" "$work/mnt" --disk-cache-mib 0 2>> "$work/mount.log" &
    mount_pid=$!
    for _ in $(seq 100); do grep -q " $work/mnt " /proc/self/mountinfo && break; sleep 0.1; done
    grep -q " $work/mnt " /proc/self/mountinfo || { cat "$work/mount.log" >&2; exit 1; }
}
cleanup() {
    stop_mount
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; sleep 1; }

"$trove" cluster start --dir "$work/cluster" --nodes 6 --ec 4+2 --scrub-interval-ms 0 >/dev/null
start_mount
mkdir "$work/mnt/d"
python3 "$here/loader.py" make "$work/mnt/d" "$files" "$kib"
python3 "$here/loader.py" make "$work/ext4" "$files" "$kib"
echo "$files files of $kib KiB; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== ext4, cold"
drop
python3 "$here/loader.py" time "$work/ext4" "$files" "$kib"
echo "== trove mount, cold"
stop_mount; start_mount; drop
python3 "$here/loader.py" time "$work/mnt/d" "$files" "$kib" "$work/mnt"
echo "== trove mount, storage warm"
stop_mount; start_mount
python3 "$here/loader.py" time "$work/mnt/d" "$files" "$kib" "$work/mnt"
echo "== trove mount, kernel warm"
python3 "$here/loader.py" time "$work/mnt/d" "$files" "$kib" "$work/mnt"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# Benchmarks the POSIX mount (`trove mount`) in one run on one machine, against the native
# client and the local disk:
#   - 1 MiB sequential read of one large file, cold caches (page cache dropped before every
#     read, so storage nodes read their shard files from disk as well): fio on the mount
#     (buffered, through the kernel page cache, and with O_DIRECT, which the kernel serves
#     without it), the native client (`trove cat` of the same file, one stream with the
#     client's read-ahead), fio on a local directory of the same disk;
#   - create/stat/remove rates of empty files: `trove bench meta` (mdtest-like) on the mount and
#     on the local directory, the same harness for both, twice: TASKS tasks in one shared
#     directory, and UNIQUE_TASKS tasks each in its own directory (mdtest -u).
# Aims (issue 3): mount >= 85% of the native client on sequential read; metadata >= 30% of the
# local disk.
#
# Record a run with:  bench/record.sh mount bench/mount.sh
# Needs root (mounting, drop_caches), fio, python3 and a release build (cargo build --release -p trove).
# Tunables (environment): SIZE_MB (file size, default 2048), RUNS (reads per target, default 3),
# ITEMS (files per task for metadata, default 2000), TASKS (default 2), UNIQUE_TASKS (default 16,
# with UNIQUE_ITEMS files each, default 250), WORK (scratch directory on
# the local disk, default /var/tmp/trove-bench-mount), TROVE (the binary, default target/release/trove).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
trove=${TROVE:-$repo/target/release/trove}
size_mb=${SIZE_MB:-2048}
runs=${RUNS:-3}
items=${ITEMS:-2000}
tasks=${TASKS:-2}
utasks=${UNIQUE_TASKS:-16}
uitems=${UNIQUE_ITEMS:-250}
work=${WORK:-/var/tmp/trove-bench-mount}

[ -x "$trove" ] || { echo "build first: cargo build --release -p trove" >&2; exit 1; }
command -v fio >/dev/null || { echo "fio is missing (scripts/deps.sh installs it)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (mounting, dropping caches)" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work/cluster" "$work/mnt" "$work/local"
mount_pid=""
cleanup() {
    if [ -n "$mount_pid" ]; then
        kill -TERM "$mount_pid" 2>/dev/null || true
        wait "$mount_pid" 2>/dev/null || true
    fi
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# fio's bandwidth of its only job in MB/s (10^6 bytes), from JSON on stdin.
fio_mbs() { python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(round((j["read"]["io_bytes"]+j["write"]["io_bytes"])/ (max(j["read"]["runtime"], j["write"]["runtime"])/1000) / 1e6, 1))'; }
median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "== setup: 6-node 4+2 cluster, mount, ${size_mb} MiB file"
"$trove" cluster start --dir "$work/cluster" --nodes 6 --ec 4+2 >/dev/null
"$trove" mount "$work/cluster" "$work/mnt" 2> "$work/mount.log" &
mount_pid=$!
for _ in $(seq 100); do grep -q " $work/mnt " /proc/self/mountinfo && break; sleep 0.1; done
grep -q " $work/mnt " /proc/self/mountinfo || { cat "$work/mount.log" >&2; exit 1; }
echo "mount options: $(grep " $work/mnt " /proc/self/mountinfo)"

write_job=(--name=seq --rw=write --bs=1M --size="${size_mb}M" --ioengine=psync --end_fsync=1 --output-format=json)
mount_write=$(fio "${write_job[@]}" --filename="$work/mnt/seq" | fio_mbs)
local_write=$(fio "${write_job[@]}" --filename="$work/local/seq" | fio_mbs)

read_job=(--name=seq --rw=read --bs=1M --size="${size_mb}M" --ioengine=psync --output-format=json)
mount_reads=() direct_reads=() native_reads=() local_reads=()
for i in $(seq "$runs"); do
    drop
    mount_reads+=("$(fio "${read_job[@]}" --filename="$work/mnt/seq" | fio_mbs)")
    drop
    direct_reads+=("$(fio "${read_job[@]}" --direct=1 --filename="$work/mnt/seq" | fio_mbs)")
    drop
    start=$(date +%s%N)
    "$trove" -c "$work/cluster" cat /seq > /dev/null
    end=$(date +%s%N)
    native_reads+=("$(python3 -c "print(round($size_mb * 1048576 / (($end - $start) / 1e9) / 1e6, 1))")")
    drop
    local_reads+=("$(fio "${read_job[@]}" --filename="$work/local/seq" | fio_mbs)")
    echo "read run $i: mount ${mount_reads[-1]} MB/s, mount O_DIRECT ${direct_reads[-1]} MB/s, native client ${native_reads[-1]} MB/s, local disk ${local_reads[-1]} MB/s"
done
m=$(median "${mount_reads[@]}")
md=$(median "${direct_reads[@]}")
n=$(median "${native_reads[@]}")
l=$(median "${local_reads[@]}")

echo
echo "== metadata: trove bench meta, $tasks tasks x $items files, shared directory, mount and local disk"
mkdir -p "$work/mnt/meta" "$work/local/meta"
# The native client's rates (same harness, through the client library) show how much of the
# mount's cost is the metadata service's own.
"$trove" bench meta -c "$work/cluster" --root /meta-native --dir "$work/mnt/meta" --dir "$work/local/meta" \
    --tasks "$tasks" --items "$items" --iterations 1 --quiet --json > "$work/meta.json"
echo "== metadata: trove bench meta, $utasks tasks x $uitems files, one directory per task, mount and local disk"
mkdir -p "$work/mnt/metau" "$work/local/metau"
"$trove" bench meta -c "$work/cluster" --root /metau-native --dir "$work/mnt/metau" --dir "$work/local/metau" \
    --tasks "$utasks" --items "$uitems" --iterations 1 --unique --quiet --json > "$work/metau.json"

echo
echo "== summary"
python3 - "$mount_write" "$local_write" "$m" "$n" "$l" "$work/meta.json" "$work/mnt/meta" "$work/metau.json" "$work/mnt/metau" "$tasks" "$utasks" "$md" <<'EOF_PY'
import json, sys
mw, lw, m, n, l = map(float, sys.argv[1:6])
md = float(sys.argv[12])
meta = json.load(open(sys.argv[6]))
mount_target = f"dir {sys.argv[7]}"
print(f"{'1 MiB sequential':<22} {'MB/s':>9}")
print(f"{'write, mount (fio)':<22} {mw:>9.1f}")
print(f"{'write, local (fio)':<22} {lw:>9.1f}")
print(f"{'read, mount (fio)':<22} {m:>9.1f}")
print(f"{'read, mount O_DIRECT':<22} {md:>9.1f}")
print(f"{'read, native client':<22} {n:>9.1f}")
print(f"{'read, local (fio)':<22} {l:>9.1f}")
print(f"mount / native client, sequential read: {100 * m / n:.0f}% (aim: >= 85%); with O_DIRECT: {100 * md / n:.0f}%")
print()
def table(path, mount_target, title):
    meta = json.load(open(path))
    rates = {}
    for t in meta["meta"]:
        side = "mount" if t["target"] == f"dir {mount_target}" else "local" if t["target"].startswith("dir ") else "native"
        for p in t["phases"]:
            rates.setdefault(p["phase"], {})[side] = p["summary"]["mean"]
    print(title)
    print(f"{'operation':<12} {'mount ops/s':>12} {'local ops/s':>12} {'mount/local':>12} {'native ops/s':>13}")
    for phase in ["file create", "file stat", "file remove", "dir create", "dir stat", "dir remove"]:
        r = rates.get(phase, {})
        if "mount" in r and "local" in r:
            native = f"{r['native']:>13.0f}" if "native" in r else f"{'-':>13}"
            print(f"{phase:<12} {r['mount']:>12.0f} {r['local']:>12.0f} {100 * r['mount'] / r['local']:>11.0f}% {native}")
    print()
table(sys.argv[6], sys.argv[7], f"metadata, {sys.argv[10]} tasks in one shared directory:")
table(sys.argv[8], sys.argv[9], f"metadata, {sys.argv[11]} tasks, one directory each (mdtest -u):")
print("(aim for file create/stat/remove: mount >= 30% of local)")
EOF_PY

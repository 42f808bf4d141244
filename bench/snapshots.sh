#!/usr/bin/env bash
# Snapshot creation is O(1) in the size of the tree, and a file read from a snapshot is as fast
# as the live file. On one local cluster (NODES, EC; scrubbing off):
#   1. a tree /t of FILES_SMALL small files: SEEDS files of 1 KiB written with `trove put` into
#      /t/d0/c0, then `trove clone` of that directory (metadata only, the chunks shared, one
#      transaction per file) to /t/d0/c1 ... until /t/d0 holds FILES_SMALL files. Then
#      `trove snapshot create /t` SNAPS times (each wall time in ms, `date +%s%N` around the
#      command, so a process start and a connection are in every figure), the metadata
#      engine's files (DIR/meta/meta.redb and its write-ahead log meta.redb.wal) in bytes
#      before and after, `trove snapshot list /t` and one `trove snapshot delete` timed, and
#      `trove stat /t` timed the same way (what any command costs: process, connection). The
#      snapshots are then deleted, so that growing the tree keeps no versions for them;
#   2. the same tree grown to FILES_BIG files by cloning /t/d0 (FILES_SMALL files) to /t/d1 ...
#      (JOBS clones at once; the time it took is printed), and the same measurements;
#   3. one file of BIG_MIB MiB of random data put at /r/big, a snapshot `s1` of /r, the cluster
#      mounted (`trove mount`), and the live file and /r/.snapshots/s1/big read with dd (1 MiB
#      blocks) RUNS times each (odd runs the live file first, even runs the snapshot's), the
#      page cache dropped before every read (so the storage nodes read their shard files from
#      disk too), MB/s (10^6 bytes) of each read; the sha256 of both, read through the mount,
#      must equal the source file's. The same reads with the native client (`trove cat`)
#      follow, for comparison.
#
#   bench/record.sh snapshots bench/snapshots.sh
#
# Needs root (mounting, drop_caches), python3 and a release build (cargo build --release -p
# trove). Tunables (environment): NODES and EC (default 3 and 2+1: metadata is what this
# measures, and a 1 KiB chunk is two shard files), SEEDS (default 100), FILES_SMALL (default
# 10000, a multiple of SEEDS), FILES_BIG (default 1000000, a multiple of FILES_SMALL; 0 skips
# step 2), SNAPS (snapshots timed per size, default 5), JOBS (clones at once, default 4),
# BIG_MIB (default 1024), RUNS (reads of each file, default 3), WORK (default
# /var/tmp/trove-bench-snapshots, removed at the end), TROVE (the binary).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
trove=${TROVE:-$here/../target/release/trove}
nodes=${NODES:-3}
ec=${EC:-2+1}
seeds=${SEEDS:-100}
files_small=${FILES_SMALL:-10000}
files_big=${FILES_BIG:-1000000}
snaps=${SNAPS:-5}
jobs=${JOBS:-4}
big_mib=${BIG_MIB:-1024}
runs=${RUNS:-3}
work=${WORK:-/var/tmp/trove-bench-snapshots}
[ -x "$trove" ] || { echo "build first: cargo build --release -p trove" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (mounting, dropping caches)" >&2; exit 1; }
[ $((files_small % seeds)) -eq 0 ] || { echo "FILES_SMALL must be a multiple of SEEDS" >&2; exit 1; }
[ $((files_big % files_small)) -eq 0 ] || { echo "FILES_BIG must be a multiple of FILES_SMALL" >&2; exit 1; }

c="$work/cluster"
mnt="$work/mnt"
mount_pid=""
cleanup() {
    if [ -n "$mount_pid" ]; then
        kill -TERM "$mount_pid" 2>/dev/null || true
        wait "$mount_pid" 2>/dev/null || true
    fi
    if grep -q " $mnt " /proc/self/mountinfo 2>/dev/null; then
        fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    fi
    "$trove" cluster stop --dir "$c" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

rm -rf "$work"
mkdir -p "$work/seed" "$mnt"
t() { "$trove" --cluster "$c" "$@"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
median() { python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# The metadata engine's bytes on disk: "redb=N wal=M" (file sizes).
meta_bytes() {
    local redb wal
    redb=$(stat -c %s "$c/meta/meta.redb")
    wal=$(stat -c %s "$c/meta/meta.redb.wal" 2>/dev/null || echo 0)
    echo "redb=$redb wal=$wal"
}
# Files below a directory, as `trove du --by-pool` counts them (summed over pools).
count_files() { t du --by-pool --json "$1" | python3 -c 'import json, sys; print(sum(p["files"] for p in json.load(sys.stdin)["pools"]))'; }

# Takes SNAPS snapshots of /t named PREFIX-1..N, prints each and the median, the metadata bytes
# before and after, the list, and one delete timed; then deletes the rest.
measure() {
    local label=$1 prefix=$2 before after ms list_ms del_ms start
    local times=() base=()
    echo "== $label: snapshots of /t"
    # What every timed command pays besides its own work: a process start, a connection and
    # one metadata round trip (`trove stat /t`).
    for i in $(seq 1 "$snaps"); do
        start=$(now_ms)
        t stat /t >/dev/null
        base+=("$(( $(now_ms) - start ))")
    done
    echo "trove stat /t (for comparison): ${base[*]} ms"
    sleep 5 # let the write-ahead log settle after the writes
    before=$(meta_bytes)
    for i in $(seq 1 "$snaps"); do
        start=$(now_ms)
        t snapshot create /t "$prefix-$i" >/dev/null
        ms=$(( $(now_ms) - start ))
        times+=("$ms")
        echo "snapshot create /t $prefix-$i: $ms ms"
    done
    sleep 5
    after=$(meta_bytes)
    start=$(now_ms)
    t snapshot list /t
    list_ms=$(( $(now_ms) - start ))
    start=$(now_ms)
    t snapshot delete /t "$prefix-1" >/dev/null
    del_ms=$(( $(now_ms) - start ))
    echo "snapshot list /t: $list_ms ms; snapshot delete /t $prefix-1: $del_ms ms"
    echo "metadata bytes before the snapshots: $before; after: $after"
    rows+=("$label | ${times[*]} | $(median "${times[@]}") | $(median "${base[@]}") | $before | $after | $list_ms | $del_ms")
    for i in $(seq 2 "$snaps"); do t snapshot delete /t "$prefix-$i" >/dev/null; done
}
rows=()

echo "== setup: $nodes nodes, $ec, scrubbing off"
"$trove" cluster start --dir "$c" --nodes "$nodes" --ec "$ec" --scrub-interval-ms 0 >/dev/null
"$trove" --version 2>/dev/null || true

echo "== $files_small files: $seeds seeds of 1 KiB, cloned"
for i in $(seq 1 "$seeds"); do head -c 1024 /dev/urandom > "$work/seed/s$i.bin"; done
t mkdir /t
t mkdir /t/d0
t mkdir /t/d0/c0
start=$(now_ms)
for f in "$work"/seed/*; do t put "$f" "/t/d0/c0/$(basename "$f")" >/dev/null; done
echo "put $seeds files in $(( $(now_ms) - start )) ms"
start=$(now_ms)
seq 1 $(( files_small / seeds - 1 )) | xargs -P "$jobs" -I{} "$trove" --cluster "$c" clone /t/d0/c0 /t/d0/c{} >/dev/null
took=$(( $(now_ms) - start ))
echo "cloned $(( files_small - seeds )) files in $took ms ($(( (files_small - seeds) * 1000 / (took > 0 ? took : 1) )) files/s, $jobs clones at once)"
echo "files in /t: $(count_files /t)"
measure "$files_small" small

if [ "$files_big" -gt "$files_small" ]; then
    echo "== $files_big files: /t/d0 ($files_small files) cloned to /t/d1 ... /t/d$(( files_big / files_small - 1 ))"
    start=$(now_ms)
    seq 1 $(( files_big / files_small - 1 )) | xargs -P "$jobs" -I{} sh -c \
        'a=$(date +%s%N); "$0" --cluster "$1" clone /t/d0 /t/d$2 >/dev/null && echo "clone /t/d0 /t/d$2: $(( ($(date +%s%N) - a) / 1000000 )) ms"' "$trove" "$c" {}
    took=$(( $(now_ms) - start ))
    echo "cloned $(( files_big - files_small )) files in $(( took / 1000 )) s ($(( (files_big - files_small) * 1000 / (took > 0 ? took : 1) )) files/s, $jobs clones at once)"
    start=$(now_ms)
    n=$(count_files /t)
    echo "files in /t: $n (trove du took $(( $(now_ms) - start )) ms)"
    measure "$files_big" big
fi

echo
echo "| files in /t | create ms (each) | median ms | stat ms (median) | metadata bytes before | after | list ms | delete ms |"
echo "|---|---|---|---|---|---|---|---|"
for r in "${rows[@]}"; do echo "| $r |"; done

echo
echo "== reads: a ${big_mib} MiB file, live and from a snapshot"
head -c $(( big_mib * 1048576 )) /dev/urandom > "$work/big"
src_sum=$(sha256sum "$work/big" | cut -d' ' -f1)
t mkdir /r
start=$(now_ms)
t put "$work/big" /r/big >/dev/null
echo "put: $(( big_mib * 1048576 / 1000 / ( $(now_ms) - start ) )) MB/s"
rm -f "$work/big"
t snapshot create /r s1
"$trove" mount --cluster "$c" "$mnt" 2> "$work/mount.log" &
mount_pid=$!
for _ in $(seq 100); do grep -q " $mnt " /proc/self/mountinfo && break; sleep 0.1; done
grep -q " $mnt " /proc/self/mountinfo || { cat "$work/mount.log" >&2; exit 1; }
ls -l "$mnt/r" "$mnt/r/.snapshots/s1"
# MB/s of one dd of FILE through the mount, the page cache dropped first.
dd_mbs() {
    local start end
    drop
    start=$(date +%s%N)
    dd if="$1" of=/dev/null bs=1M status=none
    end=$(date +%s%N)
    python3 -c "print(round($big_mib * 1048576 / (($end - $start) / 1e9) / 1e6, 1))"
}
cat_mbs() {
    local start end
    drop
    start=$(date +%s%N)
    t cat "$1" > /dev/null
    end=$(date +%s%N)
    python3 -c "print(round($big_mib * 1048576 / (($end - $start) / 1e9) / 1e6, 1))"
}
live=() snap=() live_cat=() snap_cat=()
# Odd runs read the live file first, even runs the snapshot's.
for i in $(seq 1 "$runs"); do
    if [ $((i % 2)) = 1 ]; then
        live+=("$(dd_mbs "$mnt/r/big")"); snap+=("$(dd_mbs "$mnt/r/.snapshots/s1/big")")
    else
        snap+=("$(dd_mbs "$mnt/r/.snapshots/s1/big")"); live+=("$(dd_mbs "$mnt/r/big")")
    fi
    echo "read $i: live ${live[-1]} MB/s, snapshot ${snap[-1]} MB/s (mount, dd bs=1M)"
done
for i in $(seq 1 "$runs"); do
    if [ $((i % 2)) = 1 ]; then
        live_cat+=("$(cat_mbs /r/big)"); snap_cat+=("$(cat_mbs /r/.snapshots/s1/big)")
    else
        snap_cat+=("$(cat_mbs /r/.snapshots/s1/big)"); live_cat+=("$(cat_mbs /r/big)")
    fi
    echo "read $i: live ${live_cat[-1]} MB/s, snapshot ${snap_cat[-1]} MB/s (trove cat)"
done
live_sum=$(sha256sum "$mnt/r/big" | cut -d' ' -f1)
snap_sum=$(sha256sum "$mnt/r/.snapshots/s1/big" | cut -d' ' -f1)
echo "sha256: source $src_sum, live $live_sum, snapshot $snap_sum"
[ "$live_sum" = "$src_sum" ] && [ "$snap_sum" = "$src_sum" ] || { echo "checksums differ" >&2; exit 1; }
echo "reads, median MB/s: mount live $(median "${live[@]}"), snapshot $(median "${snap[@]}"); trove cat live $(median "${live_cat[@]}"), snapshot $(median "${snap_cat[@]}")"

#!/usr/bin/env bash
# An idle cluster with many chunk records does no scans: a local cluster (NODES, EC) is filled
# with FILES small files (one chunk record each: SEEDS files of 1 KiB copied by `trove dataset
# expand`), left idle to settle, and then the metadata service's own counters are read a
# minute apart: chunk-record walks (`ScanChunks`), work-queue pages (`ScanQueue`), chunk record
# reads (`GetChunks`), every operation served, and the metadata process's CPU seconds.
#
#   bench/record.sh idle-scans bench/idle-scans.sh
#
# Tunables (environment): NODES and EC (default 3 and 2+1: a 1 KiB chunk is two shard files, so
# a million of them fit a small disk), SEEDS (default 100), COPIES (default 10000: 1,000,000
# files), JOBS
# (copies at once, default 32), IDLE_SECONDS (default 60), WORK (default
# /var/tmp/trove-bench-idle), TROVE (the binary), REUSE=1 (restart the cluster an earlier run
# left in WORK, with the binary given, instead of writing the files again: writing a million
# takes about 35 minutes on two cores), SETTLE_SECONDS (default 30: the wait before measuring).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
trove=${TROVE:-$here/../target/release/trove}
nodes=${NODES:-3}
ec=${EC:-2+1}
seeds=${SEEDS:-100}
copies=${COPIES:-10000}
jobs=${JOBS:-32}
idle=${IDLE_SECONDS:-60}
work=${WORK:-/var/tmp/trove-bench-idle}
[ -x "$trove" ] || { echo "build first: cargo build --release -p trove" >&2; exit 1; }

c="$work/cluster"
cleanup() { "$trove" cluster stop --dir "$c" >/dev/null 2>&1 || true; }
trap cleanup EXIT
if [ "${REUSE:-0}" = 1 ] && [ -f "$c/cluster.toml" ]; then
    "$trove" cluster start --dir "$c" >/dev/null
    echo "restarted the cluster in $c (REUSE=1)"
else
    rm -rf "$work"
    mkdir -p "$work/seed"
    "$trove" cluster start --dir "$c" --nodes "$nodes" --ec "$ec" --scrub-interval-ms 0 >/dev/null
    for i in $(seq 1 "$seeds"); do head -c 1024 /dev/urandom > "$work/seed/s$i.bin"; done
    "$trove" --cluster "$c" mkdir /seed
    for f in "$work"/seed/*; do "$trove" --cluster "$c" put "$f" "/seed/$(basename "$f")"; done
    start=$(date +%s)
    "$trove" --cluster "$c" dataset expand --src /seed --out /many --copies "$copies" --jobs "$jobs"
    echo "wrote $((seeds * copies)) files in $(( $(date +%s) - start )) s"
fi

meta=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["meta"]["metrics"])' "$c/cluster.toml")
counters() {
    curl -s "http://$meta/metrics" | python3 -c '
import sys
ops = {}
cpu = 0.0
walked = 0.0
for line in sys.stdin:
    if line.startswith("trove_ops_total{") and "protocol=\"meta\"" in line:
        op = line.split("op=\"", 1)[1].split("\"", 1)[0]
        ops[op] = ops.get(op, 0) + float(line.rsplit(" ", 1)[1])
    elif line.startswith("process_cpu_seconds_total"):
        cpu = float(line.rsplit(" ", 1)[1])
    elif line.startswith("trove_meta_chunk_records_walked_total"):
        walked += float(line.rsplit(" ", 1)[1])
print(int(ops.get("ScanChunks", 0)), int(ops.get("ScanQueue", 0)), int(ops.get("GetChunks", 0)), int(sum(ops.values())), f"{cpu:.2f}", int(walked))'
}
"$trove" --cluster "$c" status | head -5
settle=${SETTLE_SECONDS:-30}
echo "settling for $settle s (the repair job's first pass, and the watch's first count, over every record)"
sleep "$settle"
read -r scans0 queue0 chunks0 all0 cpu0 walked0 < <(counters)
sleep "$idle"
read -r scans1 queue1 chunks1 all1 cpu1 walked1 < <(counters)
echo "over ${idle} s idle with $((seeds * copies + seeds)) chunk records:"
echo "  ScanChunks calls: $((scans1 - scans0))"
echo "  chunk records read by walks over all of them (repair passes, health counts): $((walked1 - walked0))"
echo "  ScanQueue calls (over the network): $((queue1 - queue0))"
echo "  GetChunks calls: $((chunks1 - chunks0))"
echo "  metadata calls of any kind: $((all1 - all0)) (heartbeats, node states, announcements)"
echo "  metadata process CPU seconds: $(python3 -c "print(round($cpu1 - $cpu0, 2))")"
"$trove" --cluster "$c" job status

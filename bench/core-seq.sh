#!/usr/bin/env bash
# Sequential 1 MiB write then read of 4 GiB (4 jobs x 1 GiB, one pass each, size based) through the native client on a fresh local 6-node
# 4+2 cluster, and the same through the local file system, in one run. The page cache is
# dropped before each read phase, so both reads come from disk.
#
#   bench/core-seq.sh [OUT_DIR]      (release build first: cargo build --release -p trove)
set -euo pipefail
cd "$(dirname "$0")/.."
T=./target/release/trove
out=${1:-bench/runs/$(date -u +%F)-core-seq}
work=$(mktemp -d /var/tmp/trove-core-seq.XXXXXX)
trap '$T cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
mkdir -p "$out" "$work/local"
{
    echo "date: $(date -u +%FT%TZ)"; echo "nproc: $(nproc)"; echo "kernel: $(uname -r)"
    echo "uptime before: $(uptime)"; free -h; df -h "$work" | tail -1
} > "$out/host.txt"
$T cluster start --dir "$work/cluster" --nodes 6 --ec 4+2 > /dev/null
common=(--bs 1M --jobs 4 --qd 1 --files-per-job 1 --file-size 1G --runtime 0 --ramp 0 --keep -q --no-drop-caches)
run() { echo "\$ $*" >> "$out/command.txt"; "$@"; }
: > "$out/command.txt"
{
    run $T --cluster "$work/cluster" bench io --pattern write "${common[@]}"
    run $T bench io --dir "$work/local" --pattern write "${common[@]}"
    sync; echo 3 > /proc/sys/vm/drop_caches && echo "page cache dropped before the reads"
    run $T --cluster "$work/cluster" bench io --pattern read "${common[@]}"
    sync; echo 3 > /proc/sys/vm/drop_caches && echo "page cache dropped before the local read"
    run $T bench io --dir "$work/local" --pattern read "${common[@]}"
} 2>&1 | tee "$out/output.txt"
echo "uptime after: $(uptime)" >> "$out/host.txt"
echo "recorded in $out"

#!/usr/bin/env bash
# `trove stats` as an operator watches it during a benchmark: a local 6-node 4+2 cluster (every
# role exporting metrics), `trove stats --top` refreshing every 2 s in a tmux window of 160x40,
# and `trove bench io` writing then reading (sequential, 1 MiB, 4 jobs) through the client
# library, with the benchmark's own client exporting too (the `client` row). The tmux pane is
# captured (tmux capture-pane) every CAPTURE_S seconds while the benchmark runs and printed, so
# the record shows the view as it changed; the benchmark's own figures follow for comparison.
#
#   bench/record.sh stats-during-io bench/stats-during-io.sh
#
# Needs tmux and python3. Tunables: FILE_SIZE (per file, default 64M), JOBS (default 4),
# CAPTURE_S (default 4), WORK (default /var/tmp/trove-bench-stats).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
T=${TROVE:-$here/../target/release/trove}
file_size=${FILE_SIZE:-64M}
jobs=${JOBS:-4}
capture_s=${CAPTURE_S:-4}
work=${WORK:-/var/tmp/trove-bench-stats}
command -v tmux >/dev/null || { echo "tmux is missing: apt-get install tmux" >&2; exit 1; }
session=trove-stats-$$
cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
    "$T" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
rm -rf "$work"
mkdir -p "$work"
trap cleanup EXIT
"$T" cluster start --dir "$work/cluster" --nodes 6 --ec 4+2 --scrub-interval-ms 0 >/dev/null
bench_metrics=127.0.0.1:$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
tmux new-session -d -s "$session" -x 160 -y 40 "$T stats --cluster $work/cluster --interval 2 --top --top-rows 5; sleep 600"
capture() {
    echo "===== $1 ($(date -u +%T) UTC) ====="
    # The pane without trailing spaces and without the blank rows below the table.
    tmux capture-pane -p -t "$session" | sed -e 's/[[:space:]]*$//' | awk 'NF {for (; blank > 0; blank--) print ""; print; next} {blank++}'
    echo
}
sleep 3
capture "idle cluster"
"$T" bench io --cluster "$work/cluster" --pattern write --pattern read --jobs "$jobs" --qd 4 \
    --file-size "$file_size" --runtime 15 --ramp 2 --quiet --metrics-listen "$bench_metrics" > "$work/bench.txt" 2>&1 &
bench=$!
n=0
while kill -0 "$bench" 2>/dev/null; do
    sleep "$capture_s"
    n=$((n + 1))
    kill -0 "$bench" 2>/dev/null && capture "capture $n during trove bench io"
done
wait "$bench"
capture "after the benchmark"
echo "===== trove bench io's own figures ====="
cat "$work/bench.txt"

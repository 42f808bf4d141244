#!/usr/bin/env bash
# Where metrics' cost shows in a profile: a local 6-node 4+2 cluster and mount with every
# exporter on and an outside scraper once a second, `perf record` of the metadata service and
# the mount while `trove bench meta` creates files through the mount, then the share of their
# CPU samples in code that exists for metrics (the metered wrappers, the operation tables and
# histograms, /top, the Prometheus encoding, the HTTP exporter) and in clock_gettime (the
# latency timestamps; also read by the runtime's timers, so an upper bound). The throughput and
# CPU-time comparison of bench/metrics-overhead.sh cannot resolve 2% on a shared machine; a
# profile's shares do not move with the neighbours' load.
#
#   bench/record.sh metrics-profile bench/metrics-profile.sh
#
# Needs root (mounting), perf (Debian linux-perf), curl, python3. Tunables: TASKS (8), ITEMS
# (1500), WORK (default /var/tmp/trove-bench-metrics-profile).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
T=${TROVE:-$here/../target/release/trove}
tasks=${TASKS:-8}
items=${ITEMS:-1500}
work=${WORK:-/var/tmp/trove-bench-metrics-profile}
command -v perf >/dev/null || { echo "perf is missing (apt-get install linux-perf)" >&2; exit 1; }
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    fusermount3 -u -z "$work/mnt" 2>/dev/null || true
    "$T" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
rm -rf "$work"
trap cleanup EXIT
mkdir -p "$work/mnt"
"$T" cluster start --dir "$work/cluster" --nodes 6 --ec 4+2 --scrub-interval-ms 0 >/dev/null
"$T" mount --cluster "$work/cluster" --metrics-listen 127.0.0.1:0 "$work/mnt" 2> "$work/mount.log" &
pids+=($!)
for _ in $(seq 100); do grep -q " $work/mnt " /proc/self/mountinfo && break; sleep 0.1; done
sleep 3
meta=$(pgrep -f "$work/cluster/meta" | head -1)
mount=$(pgrep -f "mount --cluster $work/cluster" | head -1)
exporters=$("$T" stats --cluster "$work/cluster" --once --json --interval 1 | python3 -c 'import json,sys; print(" ".join(p["metrics"] for p in json.load(sys.stdin)["processes"]))')
echo "exporters scraped every second: $exporters"
( while true; do for e in $exporters; do curl -s -o /dev/null "http://$e/metrics" || true; done; sleep 1; done ) &
pids+=($!)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$work/mnt/r"
perf record -q -F 1999 -g -o "$work/perf.data" -p "$meta,$mount" -- sleep 12 >/dev/null 2>&1 &
perf_pid=$!
sleep 0.5
"$T" bench meta --dir "$work/mnt/r" --tasks "$tasks" --items "$items" --unique --files-only \
    --iterations 1 --quiet --json > "$work/meta.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["meta"][0]; print("creates/s while profiled:", round(next(p["summary"]["mean"] for p in r["phases"] if p["phase"]=="file create")))' "$work/meta.json"
wait "$perf_pid"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
perf report -i "$work/perf.data" --no-children --sort symbol --stdio -g none 2>/dev/null > "$work/report.txt"
python3 - "$work/report.txt" <<'EOF_PY'
import re, sys
metrics = re.compile(r"metered|metrics::|prometheus_client|axum|hyper::|OpTable|Histogram")
clock = re.compile(r"clock_gettime")
own, clk, rows = 0.0, 0.0, []
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d.]+)%\s+\[.\]\s+(.*)", line)
    if not m:
        continue
    share, sym = float(m.group(1)), m.group(2).strip()
    if clock.search(sym):
        clk += share
        rows.append((share, sym))
    elif metrics.search(sym) and "serve_connection" not in sym:
        own += share
        rows.append((share, sym))
print("self time of the metadata service and the mount during creates, by symbol (metrics' code):")
for share, sym in sorted(rows, reverse=True)[:15]:
    print(f"  {share:5.2f}%  {sym[:120]}")
print(f"metrics' own code: {own:.2f}% of the samples; clock_gettime (timestamps, also the runtime's timers): {clk:.2f}%; together at most {own + clk:.2f}%")
EOF_PY

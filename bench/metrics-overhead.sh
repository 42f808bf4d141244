#!/usr/bin/env bash
# What metrics cost: the same build twice in one sitting, one local 6-node 4+2 cluster and mount
# with every exporter off (`cluster start --no-metrics`, no `--metrics-listen`: nothing is
# recorded) and one with all of them on (every role, the mount, and the dashboard's sampler
# scraping every process every 2 s, plus an outside scraper every second like a busy
# Prometheus). ROUNDS rounds alternate the order (off/on, on/off, ...), each measuring
#   - a cold sequential read of a SIZE_MB file through the mount (fio, 1 MiB, page cache
#     dropped first), in MB/s;
#   - metadata create rate through the mount (`trove bench meta --files-only`, TASKS tasks x
#     ITEMS empty files each, one directory per task), in creates/s;
# and prints every round, the medians, and on/off ratios, with the load average before and
# after (the machine is shared). Throughput on a shared machine moves with its load far more
# than 2%, so each measurement also counts the CPU time (user + system, from /proc) that the
# variant's Trove processes (every role and the mount) spent on it: CPU per GiB read and per
# thousand creates, which the neighbours' load moves much less. First it prints what one recording costs, measured directly
# (crates/metrics/examples/record_cost.rs, when built).
#
#   bench/record.sh metrics-overhead bench/metrics-overhead.sh
#
# Needs root (mounting, drop_caches), fio, python3, curl. Tunables: SIZE_MB (default 1024),
# TASKS (default 8), ITEMS (default 500), ROUNDS (default 10), WORK (default
# /var/tmp/trove-bench-metrics-overhead).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
T=${TROVE:-$here/../target/release/trove}
size_mb=${SIZE_MB:-1024}
tasks=${TASKS:-8}
items=${ITEMS:-500}
rounds=${ROUNDS:-10}
work=${WORK:-/var/tmp/trove-bench-metrics-overhead}
command -v fio >/dev/null || { echo "fio is missing (scripts/deps.sh installs it)" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl is missing (scripts/deps.sh installs it)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (mounting, dropping caches)" >&2; exit 1; }

pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    for v in off on; do "$T" cluster stop --dir "$work/$v/cluster" >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
rm -rf "$work"
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for v in off on; do
    mkdir -p "$work/$v/cluster" "$work/$v/mnt"
    if [ "$v" = off ]; then
        "$T" cluster start --dir "$work/$v/cluster" --nodes 6 --ec 4+2 --scrub-interval-ms 0 --no-metrics >/dev/null
        "$T" mount --cluster "$work/$v/cluster" "$work/$v/mnt" 2> "$work/$v/mount.log" &
    else
        "$T" cluster start --dir "$work/$v/cluster" --nodes 6 --ec 4+2 --scrub-interval-ms 0 >/dev/null
        "$T" mount --cluster "$work/$v/cluster" --metrics-listen "127.0.0.1:$(free_port)" "$work/$v/mnt" 2> "$work/$v/mount.log" &
    fi
    pids+=($!)
    for _ in $(seq 100); do grep -q " $work/$v/mnt " /proc/self/mountinfo && break; sleep 0.1; done
done
# The outside scraper of the "on" cluster: every exporter `trove cluster start` recorded, and
# the mount's (announced), once a second.
sleep 3
exporters=$("$T" stats --cluster "$work/on/cluster" --once --json --interval 1 | python3 -c 'import json,sys; print(" ".join(p["metrics"] for p in json.load(sys.stdin)["processes"]))')
echo "exporters scraped every second while on: $exporters"
( while true; do for e in $exporters; do curl -s -o /dev/null "http://$e/metrics" || true; done; sleep 1; done ) &
pids+=($!)

for v in off on; do
    fio --name=seq --rw=write --bs=1M --size="${size_mb}M" --ioengine=psync --end_fsync=1 \
        --filename="$work/$v/mnt/seq" --output-format=terse >/dev/null
done
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# Clock ticks of user and system time of every process whose command line names the variant's
# directory (its roles' configurations, the mount point); fio and bench meta have exited when
# it is read.
source "$here/proc-lib.sh"
cpu_ticks() { proc_ticks "$work/$1/"; }
hz=$(getconf CLK_TCK)
fio_mbs() { python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(round(j["read"]["io_bytes"]/(j["read"]["runtime"]/1000)/1e6))'; }
creates() {
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["meta"][0]; print(round(next(p["summary"]["mean"] for p in r["phases"] if p["phase"]=="file create")))' "$1"
}
# What one recording costs here, measured directly (the end-to-end comparison below is noisier
# than that on a shared machine).
cost=$here/../target/release/examples/record_cost
if [ -x "$cost" ]; then
    "$cost"
else
    echo "(build crates/metrics/examples/record_cost.rs with \`cargo build --release -p metrics --example record_cost\` to see what one recording costs)"
fi
# What the variant's processes spend with nothing to do: heartbeats, and with metrics on the
# scrapes (the outside scraper's once a second and the dashboard's sampler every 2 s). Each
# phase's CPU below is also given net of this, which is what the recording itself costs.
declare -A idle
for v in off on; do
    t0=$(cpu_ticks "$v"); sleep 10; t1=$(cpu_ticks "$v")
    idle[$v]=$(python3 -c "print(f'{($t1 - $t0) / $hz / 10:.4f}')")
done
echo "CPU of the idle processes: off ${idle[off]} s/s, on ${idle[on]} s/s"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "round order variant: seq read MB/s, creates/s"
results=$work/results.txt
: > "$results"
for i in $(seq "$rounds"); do
    if [ $((i % 2)) -eq 1 ]; then order="off on"; else order="on off"; fi
    for v in $order; do
        drop
        t0=$(cpu_ticks "$v"); w0=$EPOCHREALTIME
        mbs=$(fio --name=seq --rw=read --bs=1M --size="${size_mb}M" --ioengine=psync \
            --filename="$work/$v/mnt/seq" --output-format=json | fio_mbs)
        t1=$(cpu_ticks "$v"); w1=$EPOCHREALTIME
        mkdir -p "$work/$v/mnt/r$i"
        "$T" bench meta --dir "$work/$v/mnt/r$i" --tasks "$tasks" --items "$items" --unique \
            --files-only --iterations 1 --quiet --json > "$work/$v.json"
        t2=$(cpu_ticks "$v"); w2=$EPOCHREALTIME
        c=$(creates "$work/$v.json")
        # CPU seconds per GiB read and per 1,000 creates, as spent and net of the idle rate.
        cpu=$(python3 -c "
gib, k, idle = $size_mb / 1024, $tasks * $items / 1000, ${idle[$v]}
r, c = ($t1 - $t0) / $hz, ($t2 - $t1) / $hz
print(f'{r / gib:.3f} {c / k:.3f} {(r - idle * ($w1 - $w0)) / gib:.3f} {(c - idle * ($w2 - $w1)) / k:.3f}')")
        set -- $cpu
        echo "round $i $v: $mbs MB/s, $c creates/s; Trove CPU $1 s per GiB read ($3 net of idle), $2 s per 1,000 creates ($4 net)"
        echo "$v $mbs $c $cpu" >> "$results"
        rm -rf "$work/$v/mnt/r$i"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$results" <<'EOF_PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(v, i): return statistics.median(float(r[i]) for r in rows if r[0] == v)
read_off, read_on = med("off", 1), med("on", 1)
cr_off, cr_on = med("off", 2), med("on", 2)
print(f"median sequential read: off {read_off:.0f} MB/s, on {read_on:.0f} MB/s: on/off {read_on / read_off:.3f} ({100 * (1 - read_on / read_off):+.1f}% cost)")
print(f"median creates: off {cr_off:.0f}/s, on {cr_on:.0f}/s: on/off {cr_on / cr_off:.3f} ({100 * (1 - cr_on / cr_off):+.1f}% cost)")
# Each round's two measurements are minutes apart at most: the median of their ratios is less
# moved by the machine's load drifting over the sitting.
off = [r for r in rows if r[0] == "off"]
on = [r for r in rows if r[0] == "on"]
for i, what in [(3, "CPU per GiB read"), (4, "CPU per 1,000 creates"), (5, "CPU per GiB read net of idle"), (6, "CPU per 1,000 creates net of idle")]:
    a, b = med("off", i), med("on", i)
    print(f"median {what}: off {a:.3f} s, on {b:.3f} s: on/off {b / a:.3f} ({100 * (b / a - 1):+.1f}% cost)")
for i, what in [(1, "sequential read"), (2, "creates"), (3, "CPU per GiB read"), (4, "CPU per 1,000 creates"), (5, "CPU per GiB read net of idle"), (6, "CPU per 1,000 creates net of idle")]:
    ratios = [float(b[i]) / float(a[i]) for a, b in zip(off, on)]
    print(f"median of per-round on/off ratios, {what}: {statistics.median(ratios):.3f} (rounds range {min(ratios):.2f}..{max(ratios):.2f})")
EOF_PY

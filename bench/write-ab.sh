#!/usr/bin/env bash
# Sequential write for two builds side by side: a 6-node 4+2 cluster per build, then RUNS
# rounds alternating the builds, each writing a new file of SIZE (1 MiB requests, fsync at the
# end) through the mount with fio (O_DIRECT, so the mount's own write path is what is timed)
# and through the native client (`trove bench io`). For telling a change of the code from a
# change of the machine: both builds measured in one sitting, each round's order swapped.
#
#   bench/record.sh write-ab bench/write-ab.sh OLD_TROVE NEW_TROVE
#
# Needs root (mounting) and fio. Tunables: SIZE (default 1G), RUNS (default 4), WORK (scratch
# directory, default /var/tmp/trove-bench-write-ab), REWRITE (seconds: the mount's fio runs
# that long over a file of SIZE, rewriting it in place after its first pass, as the sequential
# write row of small-io.sh does; default unset, one pass over a new file).
set -euo pipefail
old=${1:?usage: write-ab.sh OLD_TROVE NEW_TROVE}
new=${2:?usage: write-ab.sh OLD_TROVE NEW_TROVE}
size=${SIZE:-1G}
runs=${RUNS:-4}
work=${WORK:-/var/tmp/trove-bench-write-ab}
command -v fio >/dev/null || { echo "fio is missing (scripts/deps.sh installs it)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (mounting)" >&2; exit 1; }

source "$(dirname "$0")/ab-lib.sh"
fio_mbs() { python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(round(j["write"]["io_bytes"]/(j["write"]["runtime"]/1000)/1e6))'; }
bin_of() { [ "$1" = old ] && echo "$old" || echo "$new"; }

ab_start "$work" "$old" "$new"
results=()
for r in $(seq "$runs"); do
    order="old new"
    [ $((r % 2)) -eq 0 ] && order="new old"
    for b in $order; do
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        mount_mbs=$(fio --name=w --filename="$work/$b/mnt/w$r" --rw=write --bs=1M --size="$size" --direct=1 \
            --ioengine=psync --end_fsync=1 ${REWRITE:+--time_based --runtime="$REWRITE"} --output-format=json | fio_mbs)
        rm -f "$work/$b/mnt/w$r"
        native_mbs=$("$(bin_of "$b")" bench io -c "$work/$b/cluster" --root "/native$r" --pattern write --bs 1m \
            --file-size "$size" --files-per-job 1 --jobs 1 --qd 1 --runtime 0 --json --quiet \
            | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["io"][0]["bytes_per_s"] / 1e6))')
        echo "round $r $b: mount (fio O_DIRECT) $mount_mbs MB/s, native client $native_mbs MB/s (load $load)"
        results+=("$b $mount_mbs $native_mbs")
    done
done
printf '%s\n' "${results[@]}" | python3 -c '
import sys, statistics
rows = [l.split() for l in sys.stdin if l.strip()]
for b in ("old", "new"):
    m = [int(r[1]) for r in rows if r[0] == b]
    n = [int(r[2]) for r in rows if r[0] == b]
    print(f"{b}: median mount {statistics.median(m)} MB/s, native {statistics.median(n)} MB/s over {len(m)} rounds")'

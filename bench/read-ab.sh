#!/usr/bin/env bash
# Sequential read through the mount against the native client, for two builds side by side:
# a 6-node 4+2 cluster per build, one file written through the mount, then RUNS rounds
# alternating the builds, each a cold read (page cache dropped) through the mount (fio, 1 MiB)
# and with the native client (`trove cat` to /dev/null). For telling a change of the code from
# a change of the machine: both builds measured in one sitting. Also the CPU time the mount
# process and the native client spend per GiB, which a busy machine moves less than MB/s.
#
#   bench/record.sh read-ab bench/read-ab.sh OLD_TROVE NEW_TROVE
#
# Needs root (mounting, drop_caches) and fio. Tunables: SIZE_MB (default 1024), RUNS (default 3),
# WORK (scratch directory, default /var/tmp/trove-bench-read-ab).
set -euo pipefail
old=${1:?usage: read-ab.sh OLD_TROVE NEW_TROVE}
new=${2:?usage: read-ab.sh OLD_TROVE NEW_TROVE}
size_mb=${SIZE_MB:-1024}
runs=${RUNS:-3}
work=${WORK:-/var/tmp/trove-bench-read-ab}
command -v fio >/dev/null || { echo "fio is missing (scripts/deps.sh installs it)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (mounting, dropping caches)" >&2; exit 1; }

source "$(dirname "$0")/ab-lib.sh"
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
fio_mbs() { python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print(round(j["read"]["io_bytes"]/(j["read"]["runtime"]/1000)/1e6))'; }
# CPU time (user + system) a process has used so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks_per_s=$(getconf CLK_TCK)

ab_start "$work" "$old" "$new"
for b in old new; do
    fio --name=seq --rw=write --bs=1M --size="${size_mb}M" --ioengine=psync --end_fsync=1 \
        --filename="$work/$b/mnt/seq" --output-format=terse >/dev/null
done
echo "MB/s; CPU = user + system seconds per GiB read of the mount process / of \`trove cat\`"
for i in $(seq "$runs"); do
    for b in old new; do
        bin=${!b}
        pid=$(ab_mount_pid "$b")
        drop
        before=$(cpu_ticks "$pid")
        m=$(fio --name=seq --rw=read --bs=1M --size="${size_mb}M" --ioengine=psync \
            --filename="$work/$b/mnt/seq" --output-format=json | fio_mbs)
        mount_cpu=$(python3 -c "print(round(($(cpu_ticks "$pid") - $before) / $ticks_per_s / ($size_mb / 1024), 2))")
        drop
        start=$(date +%s%N)
        TIMEFORMAT='%U %S'
        native_time=$( { time "$bin" -c "$work/$b/cluster" cat /seq > /dev/null; } 2>&1 )
        end=$(date +%s%N)
        native_cpu=$(python3 -c "u, s = '$native_time'.split(); print(round((float(u) + float(s)) / ($size_mb / 1024), 2))")
        n=$(( size_mb * 1048576 * 1000 / (end - start) ))
        echo "round $i $b: mount $m MB/s (CPU $mount_cpu s/GiB), native client $n MB/s (CPU $native_cpu s/GiB), mount/native $(( 100 * m / n ))%"
    done
done

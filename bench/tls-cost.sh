#!/usr/bin/env bash
# What TLS and encryption at rest cost: one build, three local 6-node 4+2 clusters side by side:
# `plain` started with --plaintext, `tls` with TLS (the default: mutual TLS 1.3, AES-GCM), and
# `sealed` with TLS and --encrypt (every shard sealed with AES-256-GCM on the drives). ROUNDS
# rounds rotate the order (plain/tls/sealed, tls/sealed/plain, ...); each writes JOBS x QD files of
# FILE_SIZE through the client library (`trove bench io`, 1 MiB requests, one pass) and reads
# them back with the page cache dropped first, so every byte crosses loopback TCP from the
# storage nodes' drives. Prints every round, the medians, the ratios to plaintext, and the CPU
# time (user + system, from /proc) the variant's Trove processes and the benchmark spent per GiB
# read, which the neighbours' load moves less than throughput, and the minor page faults per GiB
# read of the reader and of the roles (each a page the kernel mapped and cleared anew, which
# reused buffers avoid). The load average is printed before and after: the machine is shared.
#
#   bench/record.sh tls-cost bench/tls-cost.sh
#
# Needs root (drop_caches) and python3. Tunables: FILE_SIZE (default 256M), JOBS (default 4),
# QD (default 4), ROUNDS (default 6), WORK (default /var/tmp/trove-bench-tls-cost).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
T=${TROVE:-$here/../target/release/trove}
file_size=${FILE_SIZE:-256M}
jobs=${JOBS:-4}
qd=${QD:-4}
rounds=${ROUNDS:-6}
work=${WORK:-/var/tmp/trove-bench-tls-cost}
[ "$(id -u)" -eq 0 ] || { echo "run as root (dropping caches)" >&2; exit 1; }

cleanup() {
    for v in plain tls sealed; do "$T" cluster stop --dir "$work/$v" >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
rm -rf "$work"
trap cleanup EXIT
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$T" cluster start --dir "$work/plain" --nodes 6 --ec 4+2 --scrub-interval-ms 0 --no-metrics --plaintext >/dev/null
"$T" cluster start --dir "$work/tls" --nodes 6 --ec 4+2 --scrub-interval-ms 0 --no-metrics >/dev/null
"$T" cluster start --dir "$work/sealed" --nodes 6 --ec 4+2 --scrub-interval-ms 0 --no-metrics --encrypt >/dev/null

# Clock ticks of user and system time of the variant's role processes (their configs are under
# its directory).
source "$here/proc-lib.sh"
role_ticks() { proc_ticks "$work/$1/"; }
role_faults() { proc_minflt "$work/$1/"; }

# Runs a command, its output into the file $1, and prints the CPU seconds and the minor page
# faults it took.
timed() {
    python3 -c '
import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    subprocess.run(sys.argv[2:], stdout=out, check=True)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime, r.ru_minflt)' "$@"
}

# One round of variant $1 under the cluster directory $2: prints "write_MBps read_MBps
# read_cpu_s bytes reader_faults role_faults", the CPU time being what the read cost the roles
# and the reader together.
round() {
    local v=$1 root=$2 before after faults_before faults_after reader
    "$T" bench io --cluster "$work/$v" --root "$root" --pattern write --jobs "$jobs" --qd "$qd" \
        --file-size "$file_size" --runtime 0 --keep --json -q > "$work/$v.write.json"
    sync; echo 3 > /proc/sys/vm/drop_caches
    before=$(role_ticks "$v")
    faults_before=$(role_faults "$v")
    reader=$(timed "$work/$v.read.json" "$T" bench io --cluster "$work/$v" --root "$root" --pattern read \
        --jobs "$jobs" --qd "$qd" --file-size "$file_size" --runtime 0 --json -q)
    after=$(role_ticks "$v")
    faults_after=$(role_faults "$v")
    python3 - "$work/$v.write.json" "$work/$v.read.json" "$((after - before))" "$reader" "$(getconf CLK_TCK)" \
        "$((faults_after - faults_before))" <<'EOF'
import json, sys
w = json.load(open(sys.argv[1]))["io"][0]
r = json.load(open(sys.argv[2]))["io"][0]
reader_cpu, reader_faults = sys.argv[4].split()
cpu = int(sys.argv[3]) / int(sys.argv[5]) + float(reader_cpu)
print(f'{w["bytes_per_s"]/1e6:.1f} {r["bytes_per_s"]/1e6:.1f} {cpu:.2f} {r["bytes"]} {reader_faults} {sys.argv[6]}')
EOF
    "$T" rm --cluster "$work/$v" -r "$root" >/dev/null
}

printf '%-6s %-6s %12s %12s %16s %20s %18s\n' round var "write MB/s" "read MB/s" "read CPU s/GiB" \
    "reader faults/GiB" "role faults/GiB"
declare -A w r c fr fs
variants=(plain tls sealed)
for i in $(seq "$rounds"); do
    for k in 0 1 2; do
        v=${variants[$(( (i - 1 + k) % 3 ))]}
        read -r wm rm secs bytes reader_faults role_faults < <(round "$v" "/bench-$i")
        cpu=$(python3 -c "print(f'{$secs/($bytes/2**30):.3f}')")
        rf=$(python3 -c "print(round($reader_faults/($bytes/2**30)))")
        sf=$(python3 -c "print(round($role_faults/($bytes/2**30)))")
        printf '%-6s %-6s %12s %12s %16s %20s %18s\n' "$i" "$v" "$wm" "$rm" "$cpu" "$rf" "$sf"
        w[$v]+="$wm "; r[$v]+="$rm "; c[$v]+="$cpu "; fr[$v]+="$rf "; fs[$v]+="$sf "
    done
done
python3 - "${w[plain]}" "${w[tls]}" "${w[sealed]}" "${r[plain]}" "${r[tls]}" "${r[sealed]}" \
    "${c[plain]}" "${c[tls]}" "${c[sealed]}" "${fr[plain]}" "${fr[tls]}" "${fr[sealed]}" \
    "${fs[plain]}" "${fs[tls]}" "${fs[sealed]}" <<'EOF'
import statistics as st, sys
v = [[float(x) for x in a.split()] for a in sys.argv[1:]]
names = ["plaintext", "TLS", "TLS + at rest"]
print()
for title, rows in (("write MB/s", v[0:3]), ("read MB/s", v[3:6]), ("read CPU s/GiB", v[6:9]),
                    ("reader faults/GiB", v[9:12]), ("role faults/GiB", v[12:15])):
    meds = [st.median(r) for r in rows]
    print(f"median {title}: " + ", ".join(f"{n} {m:.3f}" for n, m in zip(names, meds))
          + f"; TLS/plaintext {meds[1]/meds[0]:.3f}, TLS + at rest/plaintext {meds[2]/meds[0]:.3f}")
EOF
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# The metadata engines side by side (issue 5): the same local cluster (6 storage nodes, 4+2)
# started once with the embedded engine (redb) and once on PostgreSQL, each measured with
# `trove bench meta` (mdtest-like create/stat/remove rates) and `trove bench io --pattern read`
# (sequential 1 MiB reads). One run of each, recorded under bench/runs/<date>-postgres/: every
# command line, the host and its load (these machines are shared), each output, a summary.
#
#   bench/postgres.sh [OUT_DIR]
#
# PostgreSQL is a throwaway server from scripts/postgres.sh, durable (fsync on, like redb's
# commits), on loopback: the numbers show the engine's cost, not a network's. Release build:
# `cargo build --release -p trove` first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
trove="$root/target/release/trove"
[ -x "$trove" ] || { echo "build first: cargo build --release -p trove" >&2; exit 1; }
out=${1:-"$here/runs/$(date -u +%F)-postgres"}
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/trove-bench-postgres.XXXXXX")
# The server runs as the postgres user, which must reach its directory.
chmod 755 "$work"
pg_dir="$work/pg"

cleanup() {
    for c in redb postgres; do
        [ -f "$work/cluster-$c/cluster.toml" ] && "$trove" cluster stop --dir "$work/cluster-$c" >/dev/null 2>&1 || true
    done
    [ -d "$pg_dir" ] && "$root/scripts/postgres.sh" remove "$pg_dir" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

{
    echo "date: $(date -u +%FT%TZ)"
    echo "git: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown) (with uncommitted changes: $(git -C "$root" status --porcelain 2>/dev/null | wc -l) files)"
    echo "nproc: $(nproc)"
    echo "kernel: $(uname -r)"
    grep -m1 "model name" /proc/cpuinfo || true
    echo "uptime before: $(uptime)"
    free -h
} > "$out/host.txt"
: > "$out/commands.txt"

run() {
    # run NAME COMMAND...: records the command and its output as NAME.txt
    local name=$1
    shift
    # Paths inside the repository are recorded relative to it.
    printf '%q ' "$@" | sed "s|$root/||g" >> "$out/commands.txt"
    echo >> "$out/commands.txt"
    echo "== $name: $*" >&2
    "$@" > "$out/$name.txt" 2> "$out/$name.stderr.txt"
}

url=$("$root/scripts/postgres.sh" start --dir "$pg_dir" --watch $$)
echo "scripts/postgres.sh start --dir $pg_dir --watch <this script's pid>   # -> $url" >> "$out/commands.txt"
pg_version=$(runuser -u postgres -- "$(cat "$pg_dir/bindir")/postgres" --version 2>/dev/null || "$(cat "$pg_dir/bindir")/postgres" --version)
echo "postgresql: $pg_version (fsync on, synchronous_commit on, loopback TCP)" >> "$out/host.txt"

for engine in redb postgres; do
    dir="$work/cluster-$engine"
    if [ "$engine" = postgres ]; then
        run "$engine-cluster-start" "$trove" cluster start --dir "$dir" --nodes 6 --engine postgres --postgres-url "$url"
    else
        run "$engine-cluster-start" "$trove" cluster start --dir "$dir" --nodes 6
    fi
    echo "uptime before $engine: $(uptime)" >> "$out/host.txt"
    run "$engine-meta" "$trove" --cluster "$dir" bench meta --tasks 4 --items 500 --iterations 3 --quiet
    run "$engine-io-read" "$trove" --cluster "$dir" bench io --pattern read --jobs 2 --qd 4 --file-size 256M --runtime 10 --ramp 2 --quiet
    "$trove" cluster stop --dir "$dir" >/dev/null 2>&1 || true
done
echo "uptime after: $(uptime)" >> "$out/host.txt"
echo "recorded in $out" >&2

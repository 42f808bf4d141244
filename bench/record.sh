#!/usr/bin/env bash
# Runs one benchmark command and records it under bench/runs/<date>-<name>/: the command line,
# the host (nproc, kernel, free -h) and its load before and after (other work shares these
# machines), and the command's output.
#
#   bench/record.sh NAME COMMAND [ARGS...]
#
# Release builds only: build with `cargo build --release -p trove` first.
set -euo pipefail
name=${1:?usage: record.sh NAME COMMAND [ARGS...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
out="$here/runs/$(date -u +%F)-$name"
mkdir -p "$out"
{
    echo "date: $(date -u +%FT%TZ)"
    echo "nproc: $(nproc)"
    echo "kernel: $(uname -r)"
    echo "uptime before: $(uptime)"
    free -h
} > "$out/host.txt"
printf '%q ' "$@" > "$out/command.txt"
echo >> "$out/command.txt"
set +e
"$@" > >(tee "$out/output.txt") 2> "$out/stderr.txt"
rc=$?
set -e
echo "uptime after: $(uptime)" >> "$out/host.txt"
echo "exit status: $rc" >> "$out/host.txt"
echo "recorded in $out"
exit $rc

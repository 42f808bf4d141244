#!/usr/bin/env bash
# `trove bench meta` through the mount for two builds side by side: a 6-node 4+2 cluster and a
# mount per build, then RUNS rounds alternating the builds, each a full mdtest-like run on the
# mount (the page cache is dropped between the write and read phases). For telling a change of
# the code from a change of the machine: both builds measured in one sitting.
#
#   bench/record.sh meta-ab bench/meta-ab.sh OLD_TROVE NEW_TROVE
#
# Needs root (mounting, drop_caches) and python3. Tunables: TASKS (default 16), ITEMS (files per
# task, default 250), FILE_BYTES (bytes per file, default 131072: small files read whole, as a
# training reader of JPEGs does), RUNS (default 3), WORK (scratch directory, default
# /var/tmp/trove-bench-meta-ab).
set -euo pipefail
old=${1:?usage: meta-ab.sh OLD_TROVE NEW_TROVE}
new=${2:?usage: meta-ab.sh OLD_TROVE NEW_TROVE}
tasks=${TASKS:-16}
items=${ITEMS:-250}
file_bytes=${FILE_BYTES:-131072}
runs=${RUNS:-3}
work=${WORK:-/var/tmp/trove-bench-meta-ab}
[ "$(id -u)" -eq 0 ] || { echo "run as root (mounting, dropping caches)" >&2; exit 1; }

source "$(dirname "$0")/ab-lib.sh"
ab_start "$work" "$old" "$new"
echo "ops/s, $tasks tasks x $items files of $file_bytes bytes, one directory per task"
for i in $(seq "$runs"); do
    for b in old new; do
        bin=${!b}
        mkdir -p "$work/$b/mnt/r$i"
        "$bin" bench meta --dir "$work/$b/mnt/r$i" --tasks "$tasks" --items "$items" --unique \
            --files-only --file-bytes "$file_bytes" --iterations 1 --quiet --json > "$work/$b.json"
        python3 - "$work/$b.json" "round $i $b" <<'EOF_PY'
import json, sys
report = json.load(open(sys.argv[1]))["meta"][0]
print(sys.argv[2] + ": " + ", ".join(f"{p['phase']} {p['summary']['mean']:.0f}" for p in report["phases"]))
EOF_PY
    done
done

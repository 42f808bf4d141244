#!/usr/bin/env bash
# Kill-anything soak: for DURATION_S seconds (default 600), a mixed workload through the FUSE
# mount and the S3 gateway on one local cluster (writes of small and large files, overwrites,
# reads verified against what was written, renames, deletes) while a killer kills (SIGKILL) and
# restarts random storage nodes (at most 2 down at once: the parity of 4+2), the metadata
# service, the mount and the gateway. At the end everything is restarted and every file is read
# back: each must hold what its last acknowledged operation left, or (after a failed one) one
# of the outcomes that operation allows, bit for bit (never zeros that were not written), and
# no process may have panicked. Exits non-zero on any such failure. The workload, killer and
# check are bench/soak.py. Not part of the test suite: it runs for minutes.
#
#   bench/record.sh soak bench/soak.sh          # records under bench/runs/<date>-soak/
#
# Knobs: DURATION_S, KILL_EVERY_S (mean seconds between kills, default 10), SEED (default 1),
# MOUNT_WORKERS (3), S3_WORKERS (2), NODES (6), EC (4+2), TROVE (binary, default
# target/release/trove). Needs fusermount3 (Debian fuse3) and boto3 (scripts/deps.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
trove=${TROVE:-$here/target/release/trove}
work=$(mktemp -d /tmp/trove-soak.XXXXXX)
cleanup() {
    fusermount3 -u -z "$work/mnt" 2>/dev/null || true
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

echo "trove: $("$trove" --version)"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
# Nodes are called down after 2 s and marked out after 60 s (their shards are rebuilt elsewhere
# and the soak adds a node in their place), so some kills end in a rebuild and others in the
# node's return.
"$trove" cluster start --dir "$work/cluster" --nodes "${NODES:-6}" --ec "${EC:-4+2}" \
    --down-after-ms 2000 --rebuild-after-ms 60000 >/dev/null
mkdir -p "$work/mnt"
rc=0
python3 "$here/bench/soak.py" --trove "$trove" --cluster "$work/cluster" --mount "$work/mnt" \
    --duration-s "${DURATION_S:-600}" --kill-every-s "${KILL_EVERY_S:-10}" --seed "${SEED:-1}" \
    --mount-workers "${MOUNT_WORKERS:-3}" --s3-workers "${S3_WORKERS:-2}" || rc=$?
echo "status after the run:"
"$trove" --cluster "$work/cluster" status || true
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc

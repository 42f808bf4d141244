#!/usr/bin/env bash
# The ceiling of any FUSE file system on this machine, beside the Trove mount and the local
# disk, in one run: `trove bench meta` (mdtest-like create/stat/read/remove of empty files) on
#   - memfs (crates/mount/examples/memfs.rs): a FUSE file system that keeps names in memory and
#     answers every request on the thread that read it, mounted like `trove mount`;
#   - the Trove mount of a local 6-node 4+2 cluster, and the native client on the same cluster;
#   - a directory on the local disk.
# Three times: TASKS tasks in one shared directory, UNIQUE_TASKS tasks each in its own directory,
# and the latter again with the file phases only (no directory removes right before the creates).
# On a local directory every task is an OS thread making the system calls itself, as in mdtest.
# What memfs reaches is what the kernel's FUSE round trips alone allow; the distance from there
# to the Trove mount is the mount's and the metadata service's own cost.
#
# ext4 delays reusing inodes freed in the last seconds (`recently_deleted` in its inode
# allocator), which slows creates that follow many removes by 10-50x; the script waits SETTLE
# seconds (default 40) before each metadata run so that the local disk is measured rested.
#
# Record a run with:  bench/record.sh fuse-ceiling bench/fuse-ceiling.sh
# Needs root (mounting), python3 and release builds (cargo build --release -p trove, and
# cargo build --release -p mount --example memfs). Tunables (environment): ITEMS (default 2000),
# TASKS (2), UNIQUE_TASKS (16), UNIQUE_ITEMS (250), SETTLE (40), WORK (scratch directory on the
# local disk, default /var/tmp/trove-bench-fuse), TROVE and MEMFS (the binaries).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
trove=${TROVE:-$repo/target/release/trove}
memfs=${MEMFS:-$repo/target/release/examples/memfs}
items=${ITEMS:-2000}
tasks=${TASKS:-2}
utasks=${UNIQUE_TASKS:-16}
uitems=${UNIQUE_ITEMS:-250}
settle=${SETTLE:-40}
work=${WORK:-/var/tmp/trove-bench-fuse}

[ -x "$trove" ] || { echo "build first: cargo build --release -p trove" >&2; exit 1; }
[ -x "$memfs" ] || { echo "build first: cargo build --release -p mount --example memfs" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "run as root (mounting)" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work/cluster" "$work/mnt" "$work/memfs" "$work/local"
mount_pid="" memfs_pid=""
cleanup() {
    # memfs ends when unmounted; `trove mount` unmounts itself on SIGTERM.
    umount "$work/memfs" 2>/dev/null || true
    [ -z "$mount_pid" ] || kill -TERM "$mount_pid" 2>/dev/null || true
    for pid in $mount_pid $memfs_pid; do
        wait "$pid" 2>/dev/null || true
    done
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
mounted() {
    for _ in $(seq 100); do grep -q " $1 " /proc/self/mountinfo && return 0; sleep 0.1; done
    echo "$1 did not mount" >&2
    exit 1
}

"$trove" cluster start --dir "$work/cluster" --nodes 6 --ec 4+2 >/dev/null
"$trove" mount "$work/cluster" "$work/mnt" 2> "$work/mount.log" &
mount_pid=$!
mounted "$work/mnt"
"$memfs" "$work/memfs" 2> "$work/memfs.log" &
memfs_pid=$!
mounted "$work/memfs"

run() { # NAME [bench meta options]
    local name=$1
    shift
    mkdir -p "$work/mnt/$name" "$work/memfs/$name" "$work/local/$name"
    echo "== $name: waiting ${settle} s for the local disk to settle"
    sleep "$settle"
    "$trove" bench meta -c "$work/cluster" --root "/$name-native" \
        --dir "$work/memfs/$name" --dir "$work/mnt/$name" --dir "$work/local/$name" \
        --iterations 1 --quiet --json "$@" > "$work/$name.json"
}
run shared --tasks "$tasks" --items "$items"
run unique --tasks "$utasks" --items "$uitems" --unique
run files --tasks "$utasks" --items "$uitems" --unique --files-only

python3 - "$work" "$tasks" "$utasks" <<'EOF_PY'
import json, sys
work, tasks, utasks = sys.argv[1:4]
def table(name, title):
    rates = {}
    for t in json.load(open(f"{work}/{name}.json"))["meta"]:
        target = t["target"]
        side = ("memfs" if target == f"dir {work}/memfs/{name}" else
                "mount" if target == f"dir {work}/mnt/{name}" else
                "local" if target.startswith("dir ") else "native")
        for p in t["phases"]:
            rates.setdefault(p["phase"], {})[side] = p["summary"]["mean"]
    print(title)
    print(f"{'operation':<12} {'local':>9} {'memfs':>9} {'memfs/local':>12} {'mount':>9} {'mount/local':>12} {'mount/memfs':>12} {'native':>9}")
    for phase in ["file create", "file stat", "file remove", "dir create", "dir stat", "dir remove"]:
        if phase not in rates:
            continue
        r = rates[phase]
        print(f"{phase:<12} {r['local']:>9.0f} {r['memfs']:>9.0f} {100 * r['memfs'] / r['local']:>11.0f}% "
              f"{r['mount']:>9.0f} {100 * r['mount'] / r['local']:>11.0f}% {100 * r['mount'] / r['memfs']:>11.0f}% {r['native']:>9.0f}")
    print()
print("ops/s; memfs = FUSE with nothing behind it; mount = trove mount; native = client library")
table("shared", f"{tasks} tasks in one shared directory:")
table("unique", f"{utasks} tasks, one directory each (mdtest -u):")
table("files", f"{utasks} tasks, one directory each, files only (mdtest -u -F: no directory removes before the file creates):")
EOF_PY

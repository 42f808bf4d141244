# Shared by the side-by-side scripts (read-ab.sh, meta-ab.sh): sourced, not run.
#
#   ab_start WORK OLD_TROVE NEW_TROVE
#
# starts, for each build ("old", "new"), a local 6-node 4+2 cluster in WORK/<build>/cluster and
# mounts it on WORK/<build>/mnt; `ab_mount_pid old|new` gives the mount process. Everything is
# stopped and WORK removed when the calling script exits.
ab_pids=()
ab_cleanup() {
    for p in "${ab_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    "${ab_bins[0]}" cluster stop --dir "$ab_work/old/cluster" >/dev/null 2>&1 || true
    "${ab_bins[1]}" cluster stop --dir "$ab_work/new/cluster" >/dev/null 2>&1 || true
    rm -rf "$ab_work"
}
ab_start() {
    ab_work=$1
    ab_bins=("$2" "$3")
    rm -rf "$ab_work"
    trap ab_cleanup EXIT
    local b bin i=0
    for b in old new; do
        bin=${ab_bins[$i]}
        i=$((i + 1))
        mkdir -p "$ab_work/$b/cluster" "$ab_work/$b/mnt"
        "$bin" cluster start --dir "$ab_work/$b/cluster" --nodes 6 --ec 4+2 --scrub-interval-ms 0 >/dev/null
        "$bin" mount "$ab_work/$b/cluster" "$ab_work/$b/mnt" 2> "$ab_work/$b/mount.log" &
        ab_pids+=($!)
        for _ in $(seq 100); do grep -q " $ab_work/$b/mnt " /proc/self/mountinfo && break; sleep 0.1; done
    done
}
ab_mount_pid() { [ "$1" = old ] && echo "${ab_pids[0]}" || echo "${ab_pids[1]}"; }

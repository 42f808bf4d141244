#!/usr/bin/env bash
# Training-style readers on the POSIX mount (issue 3): a PyTorch DataLoader with 4 workers
# reading a directory of files byte for byte, then MLPerf Storage's engine (DLIO 2.0.0) running
# its resnet50 (TensorFlow, TFRecord) and unet3d (PyTorch, npz, with a checkpoint) workloads at
# small scale, data and checkpoints on the mount, on a local 6-node 4+2 cluster. Not part of
# scripts/test.sh: PyTorch from PyPI is the CUDA build, several GB, installed with DLIO into a
# venv under /tmp (never committed) by bench/dlio/run.sh install.
#
#   scripts/ml-mount.sh [OUT_DIR]     # installs what is missing, runs, prints "ml-mount: PASS"
#
# OUT_DIR (optional) receives the commands, host info (date, nproc, load), versions, the torch
# loader's output (on the mount and, for comparison, on a local directory), each DLIO run's
# stdout and output folder (summary.json ...) and how much the storage nodes read. Exits
# non-zero on the first failure; the mount is unmounted and the cluster stopped on exit either
# way (on failure the cluster and mount logs are copied to OUT_DIR/logs first).
#
# Knobs (environment): TROVE (default target/release/trove, built with
# `cargo build --release -p trove` when absent), DLIO_VENV (default /tmp/dlio-venv), NP (emulated
# accelerators, mpirun -np, default 2), RESNET_FILES (default 32, 1251 samples of ~112 KiB each:
# ~4.3 GB), UNET_FILES (default 32), UNET_RECORD_BYTES (mean npz size, default 16 MiB; the
# workload's own is ~140 MiB), EPOCHS (DLIO epochs, default 3), TORCH_FILES (default 256, ~170 MB).
# Needs /dev/fuse; runs as root or as a user allowed to mount FUSE (the page cache is dropped
# before each torch epoch only as root).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trove=${TROVE:-$root/target/release/trove}
venv=${DLIO_VENV:-/tmp/dlio-venv}
np=${NP:-2}
resnet_files=${RESNET_FILES:-32}
unet_files=${UNET_FILES:-32}
unet_record=${UNET_RECORD_BYTES:-16777216}
epochs=${EPOCHS:-3}
torch_files=${TORCH_FILES:-256}
loader=$root/crates/e2e/tests/ml/torch_loader.py

log() { echo "== $*" >&2; }
die() { echo "ml-mount: FAIL: $*" >&2; exit 1; }

# --- what the run needs ---
if [ ! -x "$trove" ]; then
    log "building trove (cargo build --release -p trove)"
    (cd "$root" && cargo build --release -p trove)
fi
[ -e /dev/fuse ] || die "/dev/fuse is absent: no FUSE file system can be mounted here"
if ! command -v mpirun >/dev/null || [ ! -x "$venv/bin/tfrecord2idx" ] \
    || ! "$venv/bin/python" -c 'import dlio_benchmark, tensorflow, torch' >/dev/null 2>&1; then
    log "installing DLIO, TensorFlow and PyTorch into $venv (several GB)"
    DLIO_VENV="$venv" "$root/bench/dlio/run.sh" install
fi
export PATH="$venv/bin:$PATH"

work=$(mktemp -d /tmp/trove-ml.XXXXXX)
out=${1:-$work/out}
mkdir -p "$out"
rm -rf "${out:?}/logs"
out=$(cd "$out" && pwd)
cluster=$work/cluster
mnt=$work/mnt
mkdir -p "$mnt"
mount_pid=""
status=1

cleanup() {
    set +e
    stop_sampler
    if [ "$status" -ne 0 ]; then
        echo "--- last lines of the mount's log:" >&2
        tail -20 "$work/mount.log" >&2
    fi
    if [ "$status" -ne 0 ] && [ "$out" != "$work/out" ]; then
        mkdir -p "$out/logs"
        cp "$work"/mount.log "$out/logs/" 2>/dev/null
        find "$cluster" -maxdepth 2 -name '*.log' -exec cp {} "$out/logs/" \; 2>/dev/null
    fi
    if [ -n "$mount_pid" ]; then
        if ! "$trove" umount "$mnt" 2>/dev/null; then
            "$trove" umount --lazy "$mnt" 2>/dev/null || kill -TERM "$mount_pid" 2>/dev/null
        fi
        wait "$mount_pid" 2>/dev/null
    fi
    "$trove" cluster stop --dir "$cluster" >/dev/null 2>&1
    rm -rf "$work"
    [ "$status" -eq 0 ] && echo "ml-mount: PASS" || echo "ml-mount: FAIL (see above)" >&2
}
trap cleanup EXIT

# Commands are recorded as run, with the repository root and the scratch directory abbreviated.
record() {
    local line
    line=$(printf '%q ' "$@")
    line=${line//$root\//}
    line=${line//$work/\$WORK}
    echo "${line% }" >> "$out/commands.txt"
}
note() { echo "# $*" >> "$out/commands.txt"; }
load() { echo "$1: $(uptime)" >> "$out/host.txt"; }
# What the storage nodes have read so far, summed over their processes: bytes of shard files
# (rchar: what the cluster served, as opposed to this host's page cache of the mount) and the
# part of it that came from the disk rather than the nodes' own page cache (read_bytes).
node_reads() {
    python - "$cluster/cluster.toml" <<'EOF' 2>/dev/null || echo "-1 -1"
import sys, tomllib
total = {"rchar": 0, "read_bytes": 0}
for node in tomllib.load(open(sys.argv[1], "rb"))["nodes"]:
    for line in open(f"/proc/{node['pid']}/io"):
        key, value = line.split(":")
        if key in total:
            total[key] += int(value)
print(total["rchar"], total["read_bytes"])
EOF
}
reads() {
    local now before=($2)
    now=($(node_reads))
    echo "$1: storage nodes read $(( (now[0] - before[0]) / 1000000 )) MB of shard files;" \
        "their disks read $(( (now[1] - before[1]) / 1000000 )) MB" | tee -a "$out/cluster-reads.txt" >&2
}
# The same counters 4 times a second into a file, in the background (DLIO's epochs are told apart
# afterwards by their timestamps).
sampler_pid=""
start_sampler() {
    python - "$cluster/cluster.toml" "$1" <<'EOF' &
import sys, time, tomllib
pids = [node["pid"] for node in tomllib.load(open(sys.argv[1], "rb"))["nodes"]]
with open(sys.argv[2], "w", buffering=1) as out:
    while True:
        total = {"rchar": 0, "read_bytes": 0}
        for pid in pids:
            for line in open(f"/proc/{pid}/io"):
                key, value = line.split(":")
                if key in total:
                    total[key] += int(value)
        out.write(f"{time.time():.3f} {total['rchar']} {total['read_bytes']}\n")
        time.sleep(0.25)
EOF
    sampler_pid=$!
}
stop_sampler() {
    [ -n "$sampler_pid" ] || return 0
    kill "$sampler_pid" 2>/dev/null || true
    wait "$sampler_pid" 2>/dev/null || true
    sampler_pid=""
}

{
    echo "date: $(date -u +%FT%TZ)"
    echo "nproc: $(nproc)"
    echo "kernel: $(uname -r)"
    free -h
} > "$out/host.txt"
: > "$out/commands.txt"
: > "$out/cluster-reads.txt"
{
    echo "trove: $("$trove" --version)"
    "$venv/bin/python" - <<'EOF' 2>/dev/null || true
import sys
from importlib.metadata import version
print(f"python {sys.version.split()[0]}, " + ", ".join(
    f"{p} {version(p)}" for p in ["torch", "tensorflow", "numpy", "dlio_benchmark"]))
EOF
    mpirun --version 2>/dev/null | head -1 || true
} > "$out/versions.txt"
cat "$out/versions.txt" >&2

# --- cluster and mount ---
log "6-node 4+2 cluster and mount (scratch: $work)"
load "load before"
record trove cluster start --dir "$cluster" --nodes 6 --ec 4+2
"$trove" cluster start --dir "$cluster" --nodes 6 --ec 4+2 >/dev/null
record trove mount "$cluster" "$mnt"
"$trove" mount "$cluster" "$mnt" > "$work/mount.log" 2>&1 &
mount_pid=$!
for _ in $(seq 100); do grep -q " $mnt " /proc/self/mountinfo && break; sleep 0.1; done
grep -q " $mnt " /proc/self/mountinfo || { cat "$work/mount.log" >&2; die "the mount did not appear"; }
grep " $mnt " /proc/self/mountinfo | sed "s|$work|\$WORK|g" > "$out/mountinfo.txt"

# --- PyTorch DataLoader, 4 workers ---
drop=()
[ "$(id -u)" -eq 0 ] && drop=(--drop-caches)
mkdir "$mnt/torch"
log "PyTorch DataLoader on the mount: $torch_files files, 4 workers, 2 epochs"
load "load before torch"
cmd=(python "$loader" "$mnt/torch" --files "$torch_files" --workers 4 --epochs 2 "${drop[@]}")
record "${cmd[@]}"
r0=$(node_reads)
if ! "${cmd[@]}" 2>&1 | tee "$out/torch-mount.txt"; then
    die "the PyTorch DataLoader check failed on the mount"
fi
reads "PyTorch DataLoader (write, then 2 epochs)" "$r0"
# The same on a local directory (same disk), for comparison.
mkdir "$work/local-torch"
cmd=(python "$loader" "$work/local-torch" --files "$torch_files" --workers 4 --epochs 2 "${drop[@]}")
record "${cmd[@]}"
if ! "${cmd[@]}" 2>&1 | tee "$out/torch-local.txt"; then
    die "the PyTorch DataLoader check failed on a local directory"
fi
rm -rf "$work/local-torch"

# The check must be able to fail on the mount too: one byte changed in place (at the end of the
# first 4 MiB chunk), then one file removed; each must make the loader exit 1 naming the file.
negative() {
    local what=$1 file=$2 expect=$3
    record python "$loader" "$mnt/torch" --verify-only --epochs 1
    set +e
    python "$loader" "$mnt/torch" --verify-only --epochs 1 > "$out/torch-negative-$what.txt" 2>&1
    local rc=$?
    set -e
    cat "$out/torch-negative-$what.txt"
    [ "$rc" -eq 1 ] && grep -q "FAIL.*$file\|$file.*$expect" "$out/torch-negative-$what.txt" \
        || die "negative control ($what): the loader did not report $file (exit status $rc)"
    echo "negative control ($what): failed as it must (exit status 1)"
}
log "negative controls: a changed byte, then a removed file"
changed=train/class-03/sample-00011.bin
removed=train/class-05/sample-00021.bin
note "negative control: flip byte 4194303 (end of chunk 0) of \$WORK/mnt/torch/$changed in place"
python -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(4194303); b = f.read(1); f.seek(4194303); f.write(bytes([b[0] ^ 1]))' "$mnt/torch/$changed"
negative changed-byte "$changed" "sha256 differs"
record rm "$mnt/torch/$removed"
rm "$mnt/torch/$removed"
negative removed-file "$removed" "missing"

# --- DLIO ---
# DLIO runs in a scratch directory (its records name their working directory), then its output
# folder is moved to OUT_DIR.
mkdir -p "$work/dlio"
dlio() {
    local name=$1
    shift
    local cmd=(mpirun --allow-run-as-root --oversubscribe -np "$np" dlio_benchmark "$@"
        "++workload.output.folder=dlio-$name" "hydra.run.dir=dlio-$name")
    rm -rf "${out:?}/dlio-$name"
    log "DLIO $name on the mount"
    load "load before DLIO $name"
    record "${cmd[@]}"
    local start=$SECONDS r0 rc
    r0=$(node_reads)
    start_sampler "$work/reads-$name.txt"
    set +e
    (cd "$work/dlio" && "${cmd[@]}") > "$out/dlio-$name.txt" 2>&1
    rc=$?
    set -e
    stop_sampler
    reads "DLIO $name (generation, then training)" "$r0"
    mv "$work/dlio/dlio-$name" "$out/" 2>/dev/null || true
    load "load after DLIO $name"
    echo "dlio $name: exit status $rc, $((SECONDS - start)) s" | tee -a "$out/host.txt" >&2
    grep -E '^\[(METRIC|ERROR)\]|Traceback|Error' "$out/dlio-$name.txt" | head -40 >&2 || true
    [ "$rc" -eq 0 ] || die "DLIO $name exited with status $rc (see $out/dlio-$name.txt)"
    [ -s "$out/dlio-$name/summary.json" ] || die "DLIO $name wrote no summary.json"
    # Every epoch must have trained (too few files per rank for one batch trains nothing).
    python - "$out/dlio-$name/summary.json" "$epochs" <<'EOF' || die "DLIO $name did not train every epoch"
import json, sys
per_epoch = json.load(open(sys.argv[1]))["metric"]["train_throughput_samples_per_second"]
if len(per_epoch) != int(sys.argv[2]) or min(per_epoch) <= 0:
    sys.exit(f"samples/s per epoch: {per_epoch}, for {sys.argv[2]} epochs")
EOF
}

dlio resnet50 workload=resnet50_h100 \
    "++workload.dataset.data_folder=$mnt/dlio/resnet50" \
    "++workload.dataset.num_files_train=$resnet_files" \
    ++workload.workflow.generate_data=True ++workload.workflow.train=True \
    "++workload.train.epochs=$epochs"
found=$(find "$mnt/dlio/resnet50/train" -name '*.tfrecord' | wc -l)
[ "$found" -eq "$resnet_files" ] || die "resnet50: $found TFRecord files on the mount, expected $resnet_files"

# unet3d checkpoints once, after epoch 2, into a folder on the mount (model_size as configured).
dlio unet3d workload=unet3d_h100 \
    "++workload.dataset.data_folder=$mnt/dlio/unet3d" \
    "++workload.dataset.num_files_train=$unet_files" \
    "++workload.dataset.record_length=$unet_record" \
    "++workload.dataset.record_length_stdev=$((unet_record / 4))" \
    ++workload.workflow.generate_data=True ++workload.workflow.train=True \
    "++workload.train.epochs=$epochs" \
    "++workload.checkpoint.checkpoint_folder=$mnt/dlio/unet3d-checkpoints" \
    ++workload.checkpoint.checkpoint_after_epoch=2
found=$(find "$mnt/dlio/unet3d/train" -name '*.npz' | wc -l)
[ "$found" -eq "$unet_files" ] || die "unet3d: $found npz files on the mount, expected $unet_files"
ls -l "$mnt/dlio/unet3d-checkpoints" | sed "s|$work|\$WORK|g" > "$out/unet3d-checkpoints.txt"
# The checkpoint written through the mount loads back with torch.
note "torch.load() of every model checkpoint in \$WORK/mnt/dlio/unet3d-checkpoints"
if ! python - "$mnt/dlio/unet3d-checkpoints" <<'EOF' | tee -a "$out/unet3d-checkpoints.txt"; then
import glob, os, sys, torch
files = sorted(glob.glob(os.path.join(sys.argv[1], "model-*.pt")))
if not files:
    sys.exit("no model checkpoint on the mount")
for path in files:
    state = torch.load(path)
    n = state["a"].numel()
    print(f"{os.path.basename(path)}: {os.path.getsize(path)} bytes, loads back with torch: tensor of {n} int8")
EOF
    die "the unet3d checkpoint does not load back"
fi
du -sh "$mnt/dlio/resnet50" "$mnt/dlio/unet3d" "$mnt/dlio/unet3d-checkpoints" "$mnt/torch" 2>/dev/null \
    | sed "s|$work|\$WORK|g" > "$out/dataset-sizes.txt"

# --- summary ---
load "load after"
python - "$out" "$work" "$mnt" <<'EOF' | tee "$out/summary.md"
import bisect, datetime, json, os, sys
out, work, mnt = sys.argv[1:4]
print("| workload | epochs | AU mean (%) | AU per epoch (%) | samples/s | MB/s | AU expectation |")
print("|---|---|---|---|---|---|---|")
for name in ["resnet50", "unet3d"]:
    s = json.load(open(f"{out}/dlio-{name}/summary.json"))
    m = s["metric"]
    print(f"| {name} | {s['epochs']} | {m['train_au_mean_percentage']:.1f} | "
          + ", ".join(f"{v:.1f}" for v in m["train_au_percentage"])
          + f" | {m['train_throughput_mean_samples_per_second']:.1f} | {m['train_io_mean_MB_per_second']:.1f} | "
          + f"{m['train_au_meet_expectation']} |")
print()
print("What the storage nodes read during each phase (shard-file bytes, and bytes their disks read),")
print("against the dataset's size: close to the dataset size means the epoch was served by the")
print("cluster, close to 0 that the mount host's page cache served it.")
print()
print("| workload | phase | seconds | dataset MB | storage nodes read MB | their disks read MB |")
print("|---|---|---|---|---|---|")
for name in ["resnet50", "unet3d"]:
    data = 0
    for d, _, files in os.walk(f"{mnt}/dlio/{name}/train"):
        data += sum(os.path.getsize(os.path.join(d, f)) for f in files if not f.endswith(".idx"))
    samples = [tuple(map(float, line.split())) for line in open(f"{work}/reads-{name}.txt") if line.count(" ") == 2]
    times = [t for t, _, _ in samples]
    def at(t):
        return samples[max(0, bisect.bisect_right(times, t) - 1)]
    ts = lambda iso: datetime.datetime.fromisoformat(iso).timestamp()
    epochs = json.load(open(f"{out}/dlio-{name}/per_epoch_stats.json"))
    phases = [("generation and start-up", times[0], ts(epochs["1"]["start"]))]
    phases += [(f"epoch {k}", ts(v["start"]), ts(v["end"])) for k, v in sorted(epochs.items(), key=lambda kv: int(kv[0]))]
    phases.append(("after the last epoch", ts(epochs[max(epochs, key=int)]["end"]), times[-1]))
    for label, a, b in phases:
        ra, rb = at(a), at(b)
        print(f"| {name} | {label} | {b - a:.1f} | {data / 1e6:.0f} | {(rb[1] - ra[1]) / 1e6:.0f} | {(rb[2] - ra[2]) / 1e6:.0f} |")
EOF
status=0

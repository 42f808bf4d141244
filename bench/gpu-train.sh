#!/usr/bin/env bash
# Issue 19's GPU run: a real ResNet-50 trained for a few hundred steps from an ImageNet-like
# set (`trove dataset synth`) on one NVIDIA GPU, the data read four ways in one sitting:
# synthetic tensors on the GPU (its own ceiling), torchvision ImageFolder + Pillow from local
# disk, the same through `trove mount`, and trove.torch + trove.vision through the Python SDK.
# Reports images/s, the share of time the loop waited for data, and GPU utilization
# (bench/gpu_train.py). The page cache is dropped before each way (as root).
#
#   bench/record.sh gpu-train bench/gpu-train.sh
#
# Needs a CUDA GPU and a Python with torch, torchvision and nvidia-ml-py (PYTHON, default
# python3). TROVE names the trove binary (default target/release/trove); TROVE_WHEEL a built
# trove wheel (default: built here with maturin). Knobs: IMAGES (default 20000), CLASSES (100),
# STEPS (300), WARMUP (20), BATCH (256), WORKERS (CPUs - 2), NODES (6), EC (4+2), WORK (scratch
# directory's parent, default /tmp), DEVICE (cuda; cpu checks the script without a GPU). The cluster, mount and copies are removed on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trove=${TROVE:-$root/target/release/trove}
py=${PYTHON:-python3}
images=${IMAGES:-20000}
classes=${CLASSES:-100}
steps=${STEPS:-300}
warmup=${WARMUP:-20}
batch=${BATCH:-256}
workers=${WORKERS:-$(($(nproc) > 3 ? $(nproc) - 2 : 1))}
work=$(mktemp -d "${WORK:-/tmp}/trove-gpu-train.XXXXXX")
mnt=$work/mnt
mount_pid=""
cleanup() {
    if [ -n "$mount_pid" ]; then
        fusermount3 -u -z "$mnt" >/dev/null 2>&1 || umount -l "$mnt" >/dev/null 2>&1 || true
        kill "$mount_pid" 2>/dev/null || true
    fi
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(page cache not dropped: not root)"; }

[ -x "$trove" ] || (cd "$root" && cargo build --release -p trove)
if [ -z "${TROVE_WHEEL:-}" ]; then
    (cd "$root" && python3 -m maturin build --release --manifest-path crates/py/Cargo.toml --out "$work/wheels" >&2)
    TROVE_WHEEL=$(ls "$work"/wheels/trove-*.whl)
fi
"$py" -m pip install --quiet --no-deps --no-compile --target "$work/site" "$TROVE_WHEEL"
export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}

echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo none)"
echo "cpus: $(nproc); python: $("$py" -c 'import sys, torch, torchvision; print(sys.version.split()[0], "torch", torch.__version__, "torchvision", torchvision.__version__)')"
echo "trove: $("$trove" --version)"

"$trove" cluster start --dir "$work/cluster" --nodes "${NODES:-6}" --ec "${EC:-4+2}" >/dev/null
export TROVE_CLUSTER=$work/cluster
SECONDS=0
"$trove" dataset synth --out /train --images "$images" --classes "$classes" --seed 1 --jobs "$(nproc)" >&2
echo "dataset: $images images in $classes classes written through the client in $SECONDS s"
# The local copy is read through the SDK, so it does not depend on the mount.
"$py" - "$work/local/train" <<'PY'
import os, sys, trove
c, dst = trove.Client(), sys.argv[1]
for dirpath, _, names in c.walk("/train"):
    local = os.path.join(dst, os.path.relpath(dirpath, "/train"))
    os.makedirs(local, exist_ok=True)
    for data, n in zip(c.read_many([f"{dirpath}/{n}" for n in names], concurrency=32), names):
        with open(os.path.join(local, n), "wb") as f:
            f.write(data)
PY
echo "local copy: $(du -sh "$work/local/train" | cut -f1) on $(df --output=fstype "$work" | tail -1)"
mkdir -p "$mnt"
"$trove" mount --cluster "$work/cluster" --read-only --threads 8 "$mnt" 2>"$work/mount.log" &
mount_pid=$!
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || { echo "mount failed:"; cat "$work/mount.log"; mount_pid=""; }

run() {
    local way=$1 dir=$2
    drop_caches
    echo "== $way ($dir), load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$py" "$root/bench/gpu_train.py" "$way" "$dir" --steps "$steps" --warmup "$warmup" --batch "$batch" --workers "$workers" --classes "$classes" --device "${DEVICE:-cuda}"
}
run synthetic -
run local "$work/local/train"
if [ -n "$mount_pid" ]; then run mount "$mnt/train"; fi
run sdk /train
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# Issue 19's CPU benchmark of the Python package, on one local 3-node 2+1 cluster:
# 1. images/s per core: Pillow + torchvision-style RandomResizedCrop(224) + flip against
#    trove.vision, one thread, the same files and crop boxes;
# 2. a training-style loop (no model: read, decode, crop, flip, batch of 64) in samples/s,
#    reading the same ImageNet-like set (`trove dataset synth`) through the Python SDK, through
#    `trove mount`, and from local ext4; the page cache is dropped before each epoch (as root).
#
#   bench/record.sh python-loader bench/python-loader.sh     # IMAGES (default 3000), EPOCHS (2)
#
# BASELINE_WHEEL=path/to/trove-*.whl (a wheel built from an earlier commit) also measures that
# build's trove.vision per core on the same files, in the same sitting, for an A/B.
#
# The trove wheel is built and installed into a venv under the run's temporary directory; the
# cluster, mount and local copy are removed on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trove=${TROVE:-$root/target/release/trove}
images=${IMAGES:-3000}
epochs=${EPOCHS:-2}
[ -x "$trove" ] || (cd "$root" && cargo build --release -p trove)
work=$(mktemp -d /tmp/trove-pyloader.XXXXXX)
mnt=$work/mnt
mount_pid=""
cleanup() {
    if [ -n "$mount_pid" ]; then "$trove" umount "$mnt" >/dev/null 2>&1 || fusermount3 -u "$mnt" >/dev/null 2>&1 || true; wait "$mount_pid" 2>/dev/null || true; fi
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
(cd "$root" && python3 -m maturin build --release --manifest-path crates/py/Cargo.toml --out "$work/wheels" >/dev/null 2>&1)
python3 -m venv --system-site-packages "$work/venv"
py=$work/venv/bin/python
"$py" -m pip install --quiet --no-deps "$work"/wheels/trove-*.whl
"$trove" cluster start --dir "$work/cluster" --nodes 3 --ec 2+1 >/dev/null
export TROVE_CLUSTER=$work/cluster
"$trove" dataset synth --out /bench/imagenet --images "$images" --classes 10 --width 500:500 --seed 1 >&2
mkdir -p "$mnt" "$work/local"
"$trove" mount "$work/cluster" "$mnt" --read-only 2>"$work/mount.log" &
mount_pid=$!
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || { cat "$work/mount.log" >&2; exit 1; }
cp -r "$mnt/bench/imagenet" "$work/local/imagenet"
echo "dataset: $images images ($(du -sh "$work/local/imagenet" | cut -f1)), 500 px wide, 10 classes; python $("$py" -c 'import sys; print(sys.version.split()[0])')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" "$root/bench/python_loader.py" per-core "$work/local/imagenet" 300
if [ -n "${BASELINE_WHEEL:-}" ]; then
    python3 -m venv --system-site-packages "$work/venv-baseline"
    "$work/venv-baseline/bin/python" -m pip install --quiet --no-deps "$BASELINE_WHEEL"
    echo "baseline wheel: $(basename "$BASELINE_WHEEL") (the same measurement with that build)"
    "$work/venv-baseline/bin/python" "$root/bench/python_loader.py" per-core "$work/local/imagenet" 300
fi
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" "$root/bench/python_loader.py" loop sdk /bench/imagenet "$epochs" sdk
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" "$root/bench/python_loader.py" loop fs "$mnt/bench/imagenet" "$epochs" mount
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" "$root/bench/python_loader.py" loop fs "$work/local/imagenet" "$epochs" local-ext4
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

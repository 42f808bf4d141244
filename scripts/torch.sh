#!/usr/bin/env bash
# Real PyTorch over the Python package's datasets (issue 19), outside the default test command:
# PyPI's torch is the CUDA build (several GB with its nvidia-* wheels). Installs torch into a
# venv (TORCH_VENV, default /tmp/trove-torch-venv, never committed), builds and installs the
# trove wheel there, starts a local 3-node 2+1 cluster, makes a dataset with `trove dataset
# synth` and packs it as tar and TFRecord shards, and runs crates/py/tests/torch_dataloader.py:
# DataLoader with 4 workers, 2 epochs, every sample once per epoch. Prints
# "torch-dataloader: PASS" and exits 0 only then.
#
#   scripts/torch.sh                 # IMAGES (default 400) images in CLASSES (default 8) classes
#   KEEP_VENV=0 scripts/torch.sh     # also removes the venv afterwards (~7 GB)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trove=${TROVE:-$root/target/release/trove}
venv=${TORCH_VENV:-/tmp/trove-torch-venv}
images=${IMAGES:-400}
classes=${CLASSES:-8}
source "$root/scripts/deps.sh"
[ -x "$trove" ] || (cd "$root" && cargo build --release -p trove)
if ! "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then
    echo "== installing torch into $venv (several GB)" >&2
    python3 -m venv --system-site-packages "$venv"
    "$venv/bin/pip" install --quiet torch
fi
work=$(mktemp -d /tmp/trove-torch.XXXXXX)
cleanup() {
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
    if [ "${KEEP_VENV:-1}" = 0 ]; then rm -rf "$venv"; fi
}
trap cleanup EXIT
(cd "$root" && python3 -m maturin build --release --manifest-path crates/py/Cargo.toml --out "$work/wheels" >&2)
"$venv/bin/pip" install --quiet --no-deps --force-reinstall "$work"/wheels/trove-*.whl
"$trove" cluster start --dir "$work/cluster" --nodes 3 --ec 2+1 >/dev/null
export TROVE_CLUSTER=$work/cluster
"$trove" dataset synth --out /torch/synth --images "$images" --classes "$classes" --seed 1
"$trove" dataset pack --src /torch/synth --out /torch/tar --format tar --samples-per-shard 25
"$trove" dataset pack --src /torch/synth --out /torch/tfr --format tfrecord --samples-per-shard 25
cd "$work"
"$venv/bin/python" "$root/crates/py/tests/torch_dataloader.py" /torch

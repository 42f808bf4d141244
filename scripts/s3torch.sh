#!/usr/bin/env bash
# A PyTorch dataset reading training samples through the S3 gateway with s3torchconnector
# (Amazon's S3 connector for PyTorch, on the AWS CRT), plus a checkpoint saved and loaded
# through it. Not part of scripts/test.sh: PyTorch from PyPI is the CUDA build, several GB with
# its nvidia-* wheels, installed into a venv under /tmp (never committed).
#
#   scripts/s3torch.sh            # installs what is missing, runs, prints "N passed, 0 failed"
#
# Last run here: 2026-11-22, torch 2.15.0+cu132, s3torchconnector 1.5.0, 5.4 GB venv: 3 passed
# (S3MapDataset through a DataLoader, S3IterableDataset, S3Checkpoint save and load).
#
# Knobs: VENV (default /tmp/trove-s3torch-venv), TROVE (default target/release/trove, built
# with `cargo build --release -p trove`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trove=${TROVE:-$root/target/release/trove}
venv=${VENV:-/tmp/trove-s3torch-venv}
[ -x "$trove" ] || { echo "build first: cargo build --release -p trove" >&2; exit 1; }

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import torch, s3torchconnector, boto3' >/dev/null 2>&1; then
    echo "installing torch, s3torchconnector and boto3 into $venv (several GB)..." >&2
    "$venv/bin/pip" install --quiet --upgrade pip >/dev/null
    "$venv/bin/pip" install --quiet torch s3torchconnector boto3
fi

work=$(mktemp -d /tmp/trove-s3torch.XXXXXX)
gw_pid=""
cleanup() {
    [ -n "$gw_pid" ] && kill "$gw_pid" 2>/dev/null || true
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
"$trove" cluster start --dir "$work/cluster" --nodes 6 --ec 4+2 >/dev/null
"$trove" s3 --cluster "$work/cluster" --listen 127.0.0.1:0 --access-key torch-key --secret-key torch-secret-0123 \
    > "$work/s3.out" 2> "$work/s3.err" &
gw_pid=$!
for _ in $(seq 100); do
    grep -q "listening on" "$work/s3.out" 2>/dev/null && break
    sleep 0.1
done
endpoint=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$work/s3.out")

env -u AWS_CA_BUNDLE AWS_ACCESS_KEY_ID=torch-key AWS_SECRET_ACCESS_KEY=torch-secret-0123 AWS_DEFAULT_REGION=us-east-1 \
    AWS_EC2_METADATA_DISABLED=true S3_ENDPOINT="$endpoint" "$venv/bin/python" - <<'EOF'
import hashlib, io, os
import boto3
import torch
from botocore.config import Config
from s3torchconnector import S3Checkpoint, S3ClientConfig, S3IterableDataset, S3MapDataset

ep = os.environ["S3_ENDPOINT"]
s3 = boto3.client("s3", endpoint_url=ep, config=Config(s3={"addressing_style": "path"}))
s3.create_bucket(Bucket="torch-data")
want = {}
for i in range(64):
    body = hashlib.sha256(str(i).encode()).digest() * (512 + 37 * i)
    key = f"train/shard-{i // 16}/sample-{i:04d}.bin"
    s3.put_object(Bucket="torch-data", Key=key, Body=body)
    want[key] = body
passed = 0
cfg = S3ClientConfig(force_path_style=True)

ds = S3MapDataset.from_prefix("s3://torch-data/train/", region="us-east-1", endpoint=ep, s3client_config=cfg)
assert len(ds) == len(want), f"{len(ds)} objects listed, {len(want)} written"
loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=0, collate_fn=lambda b: [(o.key, o.read()) for o in b])
got = {k: v for batch in loader for k, v in batch}
assert got == want, "S3MapDataset read other bytes"
passed += 1
print("ok S3MapDataset through a DataLoader", flush=True)

it = S3IterableDataset.from_prefix("s3://torch-data/train/shard-1/", region="us-east-1", endpoint=ep, s3client_config=cfg)
keys = sorted(o.key for o in it)
assert keys == sorted(k for k in want if k.startswith("train/shard-1/")), keys
passed += 1
print("ok S3IterableDataset", flush=True)

ckpt = S3Checkpoint(region="us-east-1", endpoint=ep, s3client_config=cfg)
model = torch.nn.Linear(512, 256)
with ckpt.writer("s3://torch-data/checkpoints/epoch-1.pt") as w:
    torch.save(model.state_dict(), w)
with ckpt.reader("s3://torch-data/checkpoints/epoch-1.pt") as r:
    state = torch.load(io.BytesIO(r.read()))
assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
passed += 1
print("ok S3Checkpoint save and load", flush=True)
print(f"{passed} passed, 0 failed")
EOF

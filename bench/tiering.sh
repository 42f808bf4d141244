#!/usr/bin/env bash
# The Isilon/DGX-1 paper's tiering experiment ("Configuring/Testing Automatic Storage Tiering")
# on a local cluster: a `flash` pool and an `hdd` pool (6 nodes each, 4+2), a file pool policy
# moving the training data to `hdd` once it has not been read for AGE, and `trove bench train`
# (ResNet-50, emulated accelerators) run three times:
#   1. on data in flash;
#   2. after the tier job moved it to hdd (the run reads from hdd only);
#   3. after the next tier run brought it back to flash (run 2 read it, so its atime is new).
# For each run: samples/s and the AU the benchmark reports, and the shard bytes each pool's
# storage nodes served (their `trove_bytes_total{protocol="storage",direction="read"}`), which
# shows where the reads went; between runs, where `stat --layout` says the chunks are.
#
#   bench/record.sh tiering bench/tiering.sh
#
# Then the same with an object pool `cold` (two storage nodes keeping their shards in a bucket of
# a real Garage S3 server, 1+1) and the tier job moving the data there:
#   4. from the bucket, under a policy by modification time (reads recall nothing);
#   5. from the bucket again after another tier run (the data stayed there), now under a
#      policy by access time (reads recall);
#   6. from flash: the tier run after run 5 brought back what it read.
#
# Both disk pools' nodes and Garage share this machine's disk, so this shows that reads follow
# the data and that the move does not slow training; it cannot show a slower tier. Tunables
# (environment): ACCELERATORS (default 4), DATASET_GIB (default 4), EPOCHS (default 2), AGE (default
# 30s), WORK (default /var/tmp/trove-bench-tiering), TROVE (the binary).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
trove=${TROVE:-$here/../target/release/trove}
accelerators=${ACCELERATORS:-4}
gib=${DATASET_GIB:-4}
epochs=${EPOCHS:-2}
age=${AGE:-30s}
work=${WORK:-/var/tmp/trove-bench-tiering}
[ -x "$trove" ] || { echo "build first: cargo build --release -p trove" >&2; exit 1; }
command -v garage >/dev/null || { echo "garage is needed: scripts/deps.sh builds it" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
c="$work/cluster"
cleanup() {
    "$trove" cluster stop --dir "$c" >/dev/null 2>&1 || true
    if [ -n "${garage_pid:-}" ]; then kill "$garage_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT
"$trove" cluster start --dir "$c" --pool flash=6 --pool hdd=6 --ec 4+2 --tier-schedule off >/dev/null
"$trove" --cluster "$c" policy add cold --pool hdd --path '/bench/**' --accessed-before "$age"
"$trove" --cluster "$c" policy add hot --pool flash
"$trove" --cluster "$c" policy list

# Shard bytes served per pool so far: "flash=N hdd=M" (node ids as `cluster start` gives them:
# in the order of cluster.toml; pools from the last `status_json`).
pool_reads() {
    python3 - "$c" <<'PY'
import json, sys, tomllib, urllib.request
c = sys.argv[1]
state = tomllib.load(open(f"{c}/cluster.toml", "rb"))
nodes = json.loads(open(f"{c}/.status.json").read())["nodes"]
pool_of = {n["id"]: n["pool"] for n in nodes}
out = {}
for i, node in enumerate(state["nodes"], start=1):
    text = urllib.request.urlopen(f"http://{node['metrics']}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("trove_bytes_total{") and 'protocol="storage"' in line and 'direction="read"' in line:
            out[pool_of.get(i, "?")] = out.get(pool_of.get(i, "?"), 0) + int(float(line.rsplit(" ", 1)[1]))
print(" ".join(f"{k}={v}" for k, v in sorted(out.items())))
PY
}
status_json() { "$trove" --cluster "$c" status --json > "$c/.status.json"; }

# Where the chunks of the training data are: "flash=N hdd=M" chunks.
layout() {
    "$trove" --cluster "$c" du --by-pool --json /bench | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(" ".join("{}: {} files, {} bytes".format(p["pool"], p["files"], p["bytes"]) for p in d["pools"]))'
}

train() {
    "$trove" --cluster "$c" bench train --workload resnet50 --accelerators "$accelerators" \
        --dataset-gib "$gib" --epochs "$epochs" --quiet --json > "$work/train-$1.json"
    python3 - "$work/train-$1.json" "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def find(o, keys):
    if isinstance(o, dict):
        for k, v in o.items():
            if k in keys and isinstance(v, (int, float)):
                yield k, v
            yield from find(v, keys)
    elif isinstance(o, list):
        for v in o:
            yield from find(v, keys)
vals = dict(find(r, {"samples_per_s", "au_percent", "au", "throughput_mib_s"}))
print(f"run {sys.argv[2]}: " + ", ".join(f"{k} {v:.1f}" for k, v in vals.items()))
PY
}

wait_tier() {
    local run
    run=$("$trove" --cluster "$c" job start tier | sed -n 's/.*(run \([0-9]*\)).*/\1/p')
    while :; do
        state=$("$trove" --cluster "$c" job status --json | python3 -c "
import json, sys
j = [j for j in json.load(sys.stdin) if j['name'] == 'tier'][0]
print(j['state'] if j['run'] == $run else 'other')")
        [ "$state" = done ] && break
        [ "$state" = failed ] && { echo "tier run failed" >&2; exit 1; }
        sleep 1
    done
    "$trove" --cluster "$c" job status | sed -n '/^tier/,/^[a-z]/p'
}

echo "== generate the dataset in flash"
"$trove" --cluster "$c" bench train --workload resnet50 --accelerators "$accelerators" --dataset-gib "$gib" --generate-only --quiet >/dev/null
echo "layout: $(layout)"

echo "== run 1: data in flash"
status_json; before=$(pool_reads)
train 1
status_json; echo "shard bytes served before: $before; after: $(pool_reads)"

echo "== wait $age without reading, then the tier job"
sleep "${age%s}"
sleep 2
wait_tier
echo "layout: $(layout)"

echo "== run 2: data in hdd"
status_json; before=$(pool_reads)
train 2
status_json; echo "shard bytes served before: $before; after: $(pool_reads)"

echo "== the tier job again: what run 2 read was accessed within $age"
sleep 2
wait_tier
echo "layout: $(layout)"

echo "== run 3: data back in flash"
status_json; before=$(pool_reads)
train 3
status_json; echo "shard bytes served before: $before; after: $(pool_reads)"

echo "== an object pool on Garage"
g="$work/garage"
mkdir -p "$g"
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
rpc=$(port)
s3=$(port)
cat > "$g/garage.toml" <<EOF
metadata_dir = "$g/meta"
data_dir = "$g/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$rpc"
rpc_public_addr = "127.0.0.1:$rpc"
rpc_secret = "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$s3"
root_domain = ".s3.garage.localhost"
EOF
RUST_LOG=garage=warn garage -c "$g/garage.toml" server > "$g/garage.log" 2>&1 &
garage_pid=$!
gar() { garage -c "$g/garage.toml" "$@"; }
node=
for _ in $(seq 1 300); do
    node=$(gar node id -q 2>/dev/null | cut -c1-16) && [ -n "$node" ] && break
    sleep 0.2
done
[ -n "$node" ] || { echo "garage did not start: $(cat "$g/garage.log")" >&2; exit 1; }
gar layout assign -z dc1 -c 10G "$node" >/dev/null
gar layout apply --version 1 >/dev/null
keyinfo=$(gar key create trove-bench)
key_id=$(echo "$keyinfo" | sed -n 's/^Key ID: *//p')
echo "$keyinfo" | sed -n 's/^Secret key: *//p' > "$g/secret"
gar bucket create trove-cold >/dev/null
gar bucket allow --read --write --owner trove-cold --key trove-bench >/dev/null
for prefix in n1 n2; do
    printf '[object]\nendpoint = "http://127.0.0.1:%s"\nbucket = "trove-cold"\nprefix = "%s"\nregion = "garage"\naccess_key_id = "%s"\nsecret_access_key_file = "%s"\nallow_http = true\n' \
        "$s3" "$prefix" "$key_id" "$g/secret" > "$g/$prefix.toml"
    for _ in $(seq 1 30); do
        "$trove" cluster add-node --dir "$c" --pool cold --object "$g/$prefix.toml" >/dev/null && break
        sleep 1
    done
done
"$trove" --cluster "$c" pool list

echo "== policy by modification time: /bench to the bucket, and reads recall nothing"
"$trove" --cluster "$c" policy rm cold
"$trove" --cluster "$c" policy add archive --pool cold --ec 1+1 --path '/bench/**' --modified-before "$age" --before hot
"$trove" --cluster "$c" policy list
wait_tier
echo "layout: $(layout)"

echo "== run 4: data in the bucket"
status_json; before=$(pool_reads)
train 4
status_json; echo "shard bytes served before: $before; after: $(pool_reads)"

echo "== the tier job again: by modification time the data stays in the bucket"
sleep 2
wait_tier
echo "layout: $(layout)"

echo "== policy by access time instead (reads from now on recall)"
"$trove" --cluster "$c" policy rm archive
"$trove" --cluster "$c" policy add archive --pool cold --ec 1+1 --path '/bench/**' --accessed-before "$age" --before hot

echo "== run 5: data still in the bucket"
status_json; before=$(pool_reads)
train 5
status_json; echo "shard bytes served before: $before; after: $(pool_reads)"

echo "== the tier job again: what run 5 read is recalled to flash"
sleep 2
wait_tier
echo "layout: $(layout)"

echo "== run 6: data recalled to flash"
status_json; before=$(pool_reads)
train 6
status_json; echo "shard bytes served before: $before; after: $(pool_reads)"

#!/usr/bin/env bash
# PUT and GET throughput of large objects through the S3 gateway (`trove s3`) against the
# native client (`trove put` / `trove get`), on one local cluster in one run.
#
#   bench/record.sh s3 bench/s3.sh          # records under bench/runs/<date>-s3/
#
# Clients: curl (one stream, SigV4 with an unsigned payload: the gateway's own cost shows, not
# the client's) and awscli (multipart, 10 threads: what users run; Python, so on a small machine
# the client itself can be the limit). The page cache is dropped before every read phase when
# run as root. Knobs: SIZE_MIB (object size, default 512), COUNT (objects per method, default 2),
# NODES (default 6), EC (default 4+2), TROVE (binary, default target/release/trove).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
trove=${TROVE:-$here/target/release/trove}
size_mib=${SIZE_MIB:-512}
count=${COUNT:-2}
nodes=${NODES:-6}
ec=${EC:-4+2}
work=$(mktemp -d /tmp/trove-s3-bench.XXXXXX)
key=bench-key
secret=bench-secret-0123456789
gw_pid=""
cleanup() {
    [ -n "$gw_pid" ] && kill "$gw_pid" 2>/dev/null || true
    "$trove" cluster stop --dir "$work/cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

drop_caches() {
    if [ "$(id -u)" -eq 0 ]; then
        sync
        echo 3 > /proc/sys/vm/drop_caches
        echo "(page cache dropped)"
    else
        echo "(page cache NOT dropped: not root)"
    fi
}

bytes=$((size_mib << 20))
# Runs "$@" and prints label, total bytes, seconds and MB/s (10^6 bytes per second).
timed() {
    local label=$1 total=$2
    shift 2
    local start end
    start=$(date +%s.%N)
    "$@"
    end=$(date +%s.%N)
    awk -v l="$label" -v b="$total" -v s="$start" -v e="$end" \
        'BEGIN { t = e - s; printf "%-34s %6d MiB in %7.2f s = %8.1f MB/s\n", l, b / 1048576, t, b / t / 1e6 }'
}

echo "trove: $("$trove" --version)"
echo "cluster: $nodes nodes, $ec; objects: $count x $size_mib MiB per method"
"$trove" cluster start --dir "$work/cluster" --nodes "$nodes" --ec "$ec" >/dev/null
head -c "$bytes" /dev/urandom > "$work/src.bin"
"$trove" --cluster "$work/cluster" mkdir /bench >/dev/null

"$trove" s3 --cluster "$work/cluster" --listen 127.0.0.1:0 --access-key "$key" --secret-key "$secret" \
    > "$work/s3.out" 2> "$work/s3.err" &
gw_pid=$!
for _ in $(seq 100); do
    grep -q "listening on" "$work/s3.out" 2>/dev/null && break
    sleep 0.1
done
endpoint=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$work/s3.out")
echo "gateway: $endpoint"
curl_s3=(curl -sS -f --aws-sigv4 "aws:amz:us-east-1:s3" --user "$key:$secret" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
aws_s3=(env -u AWS_CA_BUNDLE AWS_ACCESS_KEY_ID="$key" AWS_SECRET_ACCESS_KEY="$secret" AWS_DEFAULT_REGION=us-east-1
        AWS_EC2_METADATA_DISABLED=true aws --endpoint-url "$endpoint")

native_put() { for i in $(seq "$count"); do "$trove" --cluster "$work/cluster" put "$work/src.bin" "/bench/native-$i.bin" 2>/dev/null; done; }
native_get() { for i in $(seq "$count"); do "$trove" --cluster "$work/cluster" get "/bench/native-$i.bin" /dev/null 2>/dev/null; done; }
curl_put() { for i in $(seq "$count"); do "${curl_s3[@]}" -T "$work/src.bin" "$endpoint/bench/curl-$i.bin"; done; }
curl_get() { for i in $(seq "$count"); do "${curl_s3[@]}" -o /dev/null "$endpoint/bench/curl-$i.bin"; done; }
aws_put() { for i in $(seq "$count"); do "${aws_s3[@]}" s3 cp --only-show-errors "$work/src.bin" "s3://bench/aws-$i.bin"; done; }
aws_get() { for i in $(seq "$count"); do "${aws_s3[@]}" s3 cp --only-show-errors "s3://bench/aws-$i.bin" "$work/aws-back.bin"; rm -f "$work/aws-back.bin"; done; }

total=$((bytes * count))
echo
echo "== PUT (write) =="
timed "native client (trove put)" "$total" native_put
timed "S3 PUT, curl, 1 stream" "$total" curl_put
timed "S3 multipart, awscli 10 threads" "$total" aws_put
echo
echo "== GET (read) =="
drop_caches
timed "native client (trove get)" "$total" native_get
drop_caches
timed "S3 GET, curl, 1 stream" "$total" curl_get
drop_caches
timed "S3 GET, awscli ranged, 10 threads" "$total" aws_get
echo
# The gateway answers with the same bytes (spot check of one object each way).
"${curl_s3[@]}" "$endpoint/bench/native-1.bin" | cmp - "$work/src.bin" && echo "check: S3 GET of a natively written object matches"
"$trove" --cluster "$work/cluster" cat /bench/curl-1.bin | cmp - "$work/src.bin" && echo "check: native read of an S3 PUT object matches"
echo "gateway warnings: $(grep -c WARN "$work/s3.err" || true)"

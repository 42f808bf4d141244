#!/usr/bin/env bash
# Fuzzes Trove's decoders (the targets in fuzz/, listed in fuzz/Cargo.toml): builds them with
# cargo-fuzz (libFuzzer, coverage-guided; AddressSanitizer on the Rust code), writes a starting
# corpus made by the product's own encoders (fuzz/src/bin/seeds.rs), and runs every target, or
# the ones named, for FUZZ_SECONDS each, JOBS targets at a time. Prints one line per target: runs
# executed, corpus size, coverage, and whether it crashed. A crash leaves its input under
# fuzz/artifacts/<target>/ (replay: cd fuzz && cargo fuzz run <target> <file>) and makes the
# script exit 1.
#
#   bench/fuzz.sh [TARGET...]            FUZZ_SECONDS=600 JOBS=$(nproc) by default
#   bench/record.sh fuzz bench/fuzz.sh   to keep the run under bench/runs/
#
# The corpus (fuzz/corpus/) is kept between runs, so later runs start where earlier ones got.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
seconds=${FUZZ_SECONDS:-600}
jobs=${JOBS:-$(nproc)}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(wire_frame wire_messages tls_records shard_file disk_cache_file kv_wal s3_request bucket_policy tfrecord jpeg)
fi
# clang builds libjpeg-turbo's C code (jpeg target) with libFuzzer's coverage counters, so the
# fuzzer is guided by the C decoder's branches too, not only by the Rust around it.
if ! command -v clang >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq clang >/dev/null
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked --version 0.13.1
# cargo-fuzz passes -Z flags (the sanitizer) that a stable toolchain accepts only with this.
export RUSTC_BOOTSTRAP=1
cd fuzz
# The same for every build and run below (a change would rebuild the C code of every crate).
export CC=clang CFLAGS="-fsanitize-coverage=inline-8bit-counters,pc-table,trace-cmp -g"
host=$(rustc -vV | sed -n 's/^host: //p')
# libjpeg-turbo's build does not notice a change of CFLAGS: rebuild it so it surely has them.
cargo clean --release --target "$host" -p turbojpeg-sys >/dev/null 2>&1 || true
# Paths of the checkout are shown relative to it, so a recorded run names no machine's paths.
root=$(cd .. && pwd)
cargo fuzz build --release 2>&1 | sed "s#($root/#(#" >&2
"target/$host/release/seeds" corpus
mkdir -p logs
run() {
    local t=$1
    # -timeout: one input may take at most 10 s; -rss_limit_mb: the whole process 2 GiB.
    cargo fuzz run --release "$t" "corpus/$t" -- -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -max_len=262144 -print_final_stats=1 > "logs/$t.log" 2>&1
}
# At most $jobs targets at once; a target's verdict is read from its log below.
running=0
for t in "${targets[@]}"; do
    run "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true
failed=0
for t in "${targets[@]}"; do
    log="logs/$t.log"
    runs=$(grep -a -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -a -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
    corpus=$(ls "corpus/$t" | wc -l)
    if grep -a -q 'SUMMARY\|panicked\|deadly signal\|ERROR: libFuzzer' "$log"; then
        echo "$t: CRASHED after $runs runs; see fuzz/$log and fuzz/artifacts/$t/"
        grep -a -m3 'panicked\|SUMMARY\|ERROR' "$log" | sed 's/^/    /'
        failed=1
    else
        echo "$t: ${seconds} s, $runs runs, no crash; corpus $corpus inputs, $cov"
    fi
done
exit $failed

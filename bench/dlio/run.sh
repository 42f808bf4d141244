#!/usr/bin/env bash
# Installs MLPerf Storage's engine (DLIO 2.0.0) in a venv under /tmp and runs one workload on a
# local directory, next to `trove bench train` with the same configuration, so anyone can
# repeat the fidelity comparison recorded in bench/runs/.
#
#   bench/dlio/run.sh install                 # once: venv in $DLIO_VENV (default /tmp/dlio-venv)
#   bench/dlio/run.sh run OUT_DIR             # DLIO, then trove bench train, same config
#   bench/dlio/run.sh compare OUT_DIR         # the comparison table again
#
# Why the install is done by hand: `pip install dlio-benchmark` fails as published (it requires
# nvidia-dali-cuda110, which PyPI does not have), so DLIO is installed with --no-deps and its
# light dependencies are added one by one; DALI's `tfrecord2idx` (called by DLIO's TFRecord
# generator) is replaced by a small stand-in that writes the same index.
#
# Both tools generate their dataset and train right after, with the data in the page cache (DLIO
# drops no caches; `--no-drop-caches` makes ours do the same), so the comparison is of the
# emulators, not of the disk.
#
# Environment: DLIO_VENV, NP (emulated accelerators, default 2), FILES (TFRecord files, default
# 32), EPOCHS (default 3), WORKLOAD (default resnet50_h100), TROVE (the trove binary, default
# target/release/trove).
set -euo pipefail

VENV=${DLIO_VENV:-/tmp/dlio-venv}
NP=${NP:-2}
FILES=${FILES:-32}
EPOCHS=${EPOCHS:-3}
WORKLOAD=${WORKLOAD:-resnet50_h100}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TROVE=${TROVE:-$ROOT/target/release/trove}

install() {
    if ! command -v mpirun >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null
    fi
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
    "$VENV/bin/pip" install -q --no-deps dlio-benchmark==2.0.0
    # DLIO's declared dependencies minus nvidia-dali-cuda110; it imports both frameworks.
    "$VENV/bin/pip" install -q 'Pillow>=9.3.0' 'PyYAML>=6.0.0' 'h5py>=3.11.0' 'mpi4py>=3.1.4' \
        'numpy>=1.23.5,<2.2' 'omegaconf>=2.2.0' 'pandas>=1.5.1' 'psutil>=5.9.8' 'pydftracer==1.0.2' \
        'hydra-core>=1.3.2' 'tensorflow>=2.11.0' 'torch>=2.2.0' torchvision torchaudio
    # Stand-in for DALI's tfrecord2idx: one line "offset length" per record.
    cat > "$VENV/bin/tfrecord2idx" <<'PY'
#!/usr/bin/env python3
"""Writes a TFRecord index (record offset and total framed length per line), like DALI's tool."""
import struct, sys
src, dst = sys.argv[1], sys.argv[2]
with open(src, 'rb') as f, open(dst, 'w') as out:
    offset = 0
    while True:
        head = f.read(12)
        if len(head) < 12:
            break
        (length,) = struct.unpack('<Q', head[:8])
        f.seek(length + 4, 1)
        out.write(f"{offset} {12 + length + 4}\n")
        offset += 12 + length + 4
PY
    chmod +x "$VENV/bin/tfrecord2idx"
    "$VENV/bin/python" -c 'import dlio_benchmark, tensorflow, torch; print("dlio ok")'
}

host_info() {
    echo "date: $(date -u +%FT%TZ)"
    echo "nproc: $(nproc)"
    echo "kernel: $(uname -r)"
    echo "uptime: $(uptime)"
    free -h
}

run() {
    local out=${1:?usage: run.sh run OUT_DIR}
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    local data=${DATA_DIR:-/tmp/dlio-data}
    rm -rf "$data" "$out/dlio-output"
    mkdir -p "$data"
    host_info > "$out/host.txt"
    export PATH="$VENV/bin:$PATH"
    local cmd=(mpirun --allow-run-as-root --oversubscribe -np "$NP" dlio_benchmark "workload=$WORKLOAD"
        "++workload.dataset.data_folder=$data"
        "++workload.dataset.num_files_train=$FILES"
        "++workload.workflow.generate_data=True" "++workload.workflow.train=True"
        "++workload.train.epochs=$EPOCHS"
        "++workload.output.folder=$out/dlio-output" "hydra.run.dir=$out/dlio-output")
    echo "${cmd[*]}" > "$out/dlio-command.txt"
    echo "uptime before DLIO: $(uptime)" >> "$out/host.txt"
    "${cmd[@]}" 2>&1 | tee "$out/dlio-output.txt"
    local model=${WORKLOAD%_*} acc=${WORKLOAD##*_}
    local tcmd=("$TROVE" bench train --dir "$data/trove" --workload "$model" --accelerator "$acc"
        --accelerators "$NP" --files "$FILES" --epochs "$EPOCHS" --json --quiet --no-drop-caches)
    echo "${tcmd[*]}" > "$out/trove-command.txt"
    echo "uptime before trove: $(uptime)" >> "$out/host.txt"
    "${tcmd[@]}" > "$out/trove-output.json" 2> "$out/trove-stderr.txt"
    echo "uptime after: $(uptime)" >> "$out/host.txt"
    compare "$out" | tee "$out/comparison.md"
    rm -rf "$data"
}

# Puts DLIO's summary.json next to our JSON: AU and samples/s, and whether ours is within 10%.
compare() {
    python3 - "$1" <<'PY'
import json, sys
out = sys.argv[1]
d = json.load(open(f"{out}/dlio-output/summary.json"))["metric"]
t = json.load(open(f"{out}/trove-output.json"))["train"][0]["runs"][0]
rows = [
    ("AU (%)", d["train_au_mean_percentage"], t["au"] * 100),
    ("samples/s", d["train_throughput_mean_samples_per_second"], t["overall_samples_per_s"]),
    ("MB/s (samples/s x record size)", d["train_io_mean_MB_per_second"], t["overall_samples_per_s"] * 114660 / 1048576),
]
print("| metric | DLIO 2.0.0 | trove bench train | difference | within 10% |")
print("|---|---|---|---|---|")
for name, a, b in rows:
    diff = (b - a) / a * 100
    print(f"| {name} | {a:.1f} | {b:.1f} | {diff:+.1f}% | {'yes' if abs(diff) <= 10 else 'NO'} |")
print()
print("Per-epoch AU (%), DLIO:", ", ".join(f"{v:.1f}" for v in d["train_au_percentage"]))
print("Per-epoch AU (%), trove:", ", ".join(f"{e['au'] * 100:.1f}" for e in t["epochs"]))
print("Per-epoch samples/s, DLIO:", ", ".join(f"{v:.0f}" for v in d["train_throughput_samples_per_second"]))
print("Per-epoch samples/s, trove:", ", ".join(f"{e['samples_per_s']:.0f}" for e in t["epochs"]))
PY
}

case "${1:-}" in
    install) install ;;
    compare) compare "${2:?usage: run.sh compare OUT_DIR}" ;;
    run) shift; run "$@" ;;
    *) echo "usage: $0 install | run OUT_DIR" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Sweeps seeds of the deterministic cluster simulation (crates/sim) in a release build: every
# seed runs the real services under a lossy network, crashes and cuts, and its checkers. Prints
# each seed's verdict and trace digest, then the simulator's speed (seeds per minute, simulated
# seconds per wall second). A failing seed replays with `cargo run -p sim -- --seed N --trace`.
#
#   bench/sim-sweep.sh [SEEDS [FIRST [EXTRA SIM ARGS...]]]     (default: 1000 seeds from 0)
#
# Recorded under bench/runs/ with bench/record.sh:
#   bench/record.sh sim-sweep bench/sim-sweep.sh 1000
set -euo pipefail
seeds=${1:-1000}
first=${2:-0}
shift $(( $# > 2 ? 2 : $# ))
cd "$(dirname "$0")/.."
cargo build --release --locked -p sim
./target/release/sim --seeds "$seeds" --from "$first" "$@"

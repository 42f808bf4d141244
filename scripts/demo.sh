#!/usr/bin/env bash
# Builds Trove and runs `trove demo`: a 6-node 4+2 cluster, 2 GiB of mixed files, two nodes
# killed, every byte verified. Extra arguments go to `trove demo` (e.g. --json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
cargo build --release --locked -p trove
exec ./target/release/trove demo "$@"

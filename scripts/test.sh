#!/usr/bin/env bash
# Runs Trove's whole test suite: unit tests, engine conformance and crash tests, and the
# integration tests that start real clusters of `trove` processes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
cargo test --workspace --release --locked

#!/usr/bin/env bash
# Runs Trove's whole test suite: the formatting check (rustfmt.toml), unit tests, engine
# conformance and crash tests, and the integration tests that start real clusters of `trove`
# processes.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
cargo fmt --all -- --check
cargo test --workspace --release --locked

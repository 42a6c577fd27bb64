#!/usr/bin/env bash
# test.sh: every check hpcgate has, from a fresh machine: set-up, format, lints, then the whole
# test suite (unit, integration, attack tables with real bwrap, a real local Slurm cluster, the
# policy engine with real and hostile guests). CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked

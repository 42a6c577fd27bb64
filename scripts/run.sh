#!/usr/bin/env bash
# run.sh [hpcgate run options]: set up what is missing (bubblewrap, the pinned Rust toolchain),
# build hpcgate in release mode, and run the gateway over stdio on the embedded default config:
# state in ~/.local/share/hpcgate, the stock policies on, the local sandbox executor. Only the
# MCP stream goes to stdout, so an MCP client can launch this script directly.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --no-slurm >&2
cargo build --release --locked -p hpcgate >&2
exec "${CARGO_TARGET_DIR:-target}/release/hpcgate" run "$@"

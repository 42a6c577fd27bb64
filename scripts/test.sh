#!/usr/bin/env bash
# test.sh: every check hpcgate has, from a fresh machine: set-up, format, lints, then the whole
# test suite (unit, integration, attack tables with real bwrap, a real local Slurm cluster, the
# policy engine with real and hostile guests). CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# The proxy tests bind binaries from the target dir into the sandbox, and binds under /tmp are
# refused (the sandbox has its own /tmp): a checkout under /tmp builds into /var/tmp instead.
if [[ -z "${CARGO_TARGET_DIR:-}" && "$PWD" == /tmp/* ]]; then
    export CARGO_TARGET_DIR="/var/tmp/hpcgate-target/$(printf '%s' "$PWD" | sha256sum | cut -c1-16)"
fi

# Each step's wall time goes to stderr at the end, so a slow suite says where its minutes went.
timings=()
step() { # NAME COMMAND...: runs COMMAND and notes how long it took
    local name="$1" started=$SECONDS
    shift
    "$@"
    timings+=("$(printf '%-24s %5d s' "$name" $((SECONDS - started)))")
}
report() { printf 'test.sh: %s\n' "${timings[@]}" "$(printf '%-24s %5d s' total "$SECONDS")" >&2; }
trap report EXIT

step setup scripts/setup.sh
step fmt cargo fmt --all --check
# Clippy lints the workspace inside the test build rather than in a `cargo clippy` pass of its
# own. `cargo clippy` only checks, so every dependency (and the guests' build scripts under it)
# was compiled twice, checked and then built. Here clippy's driver compiles the workspace's own
# crates, every target as a test and as a plain build, with `-D warnings`, passed the way
# `cargo clippy -- -D warnings` passes it (each argument followed by `__CLIPPY_HACKERY__`), and
# dependencies go to rustc as usual. The test run keeps the same environment, which cargo's
# fingerprints include, so nothing compiles again. Tests that run cargo inherit it: the proxy
# tests' server is found fresh, and the Rust scaffold of `policy new` must be lint-clean too.
lint=(env "RUSTC_WORKSPACE_WRAPPER=$(rustc --print sysroot)/bin/clippy-driver"
    "CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
# JavaScript and Python policies are built inside the tests (with the componentizers setup.sh
# installs): the scaffolds of `policy new --lang js|python` (host/tests/it/cli.rs) and the
# examples and hostile guests (tests/e2e), their components kept in the target directory.
# A snapshot that differs fails; nothing is written or accepted (`cargo insta review` does that).
step "clippy, build tests" "${lint[@]}" cargo test --workspace --locked --no-run
# Most tests wait on other processes (bwrap, Slurm, MCP servers and clients) more than they
# compute: with four at a time the host's integration tests take a fifth to a quarter less
# wall time than with libtest's default of one per core on 2 cores. The end-to-end and
# deadline binaries keep the default: the deadline tests measure wall time. Every test runs
# even when one fails; the step fails at the end.
tests() {
    local status=0
    "${lint[@]}" INSTA_UPDATE=no cargo test --workspace --exclude hpcgate-tests --locked \
        --no-fail-fast -- --test-threads 4 || status=$?
    "${lint[@]}" INSTA_UPDATE=no cargo test --workspace --locked --no-fail-fast \
        --test e2e --test deadline || status=$?
    return "$status"
}
step tests tests
# stock:cedar is a workspace of its own (`policies/stock/cedar/Cargo.toml` says why); its native
# build goes beside the others, not under policies/ (which the guest build scripts watch).
cedar=(--manifest-path policies/stock/cedar/Cargo.toml --target-dir "${CARGO_TARGET_DIR:-target}/cedar-native")
step "cedar fmt" cargo fmt --manifest-path policies/stock/cedar/Cargo.toml --check
step "cedar clippy, tests" "${lint[@]}" cargo test "${cedar[@]}" --locked
# The official MCP conformance suite against the built gateway, for each spec version it knows.
step conformance scripts/conformance.sh

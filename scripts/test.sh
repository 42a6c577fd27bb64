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
step clippy cargo clippy --workspace --all-targets --locked -- -D warnings
# JavaScript and Python policies are built inside the tests (with the componentizers setup.sh
# installs): the scaffolds of `policy new --lang js|python` (host/tests/it/cli.rs) and the
# examples and hostile guests (tests/e2e), their components kept in the target directory.
# A snapshot that differs fails; nothing is written or accepted (`cargo insta review` does that).
step "build tests" cargo test --workspace --locked --no-run
step tests env INSTA_UPDATE=no cargo test --workspace --locked --no-fail-fast
# stock:cedar is a workspace of its own (`policies/stock/cedar/Cargo.toml` says why); its native
# build goes beside the others, not under policies/ (which the guest build scripts watch).
cedar=(--manifest-path policies/stock/cedar/Cargo.toml --target-dir "${CARGO_TARGET_DIR:-target}/cedar-native")
step "cedar fmt" cargo fmt --manifest-path policies/stock/cedar/Cargo.toml --check
step "cedar clippy" cargo clippy "${cedar[@]}" --all-targets --locked -- -D warnings
step "cedar tests" cargo test "${cedar[@]}" --locked
# The official MCP conformance suite against the built gateway, for each spec version it knows.
step conformance scripts/conformance.sh

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

# The build needs only the Rust toolchain. The rest of the set-up (Debian packages, the MCP
# clients and componentizers from PyPI and npm: about 50 s on a fresh machine, much of it CPU)
# is for the tests, so it runs beside the build, its output kept until it is awaited.
step toolchain scripts/setup.sh --toolchain
setup_log="$(mktemp)"
nice -n 10 scripts/setup.sh --no-toolchain >"$setup_log" 2>&1 &
setup_pid=$!
finish_setup() { # waits for the set-up beside the build and shows what it said
    local status=0
    [ -n "$setup_pid" ] || return 0
    wait "$setup_pid" || status=$?
    setup_pid=
    cat "$setup_log" >&2
    rm -f "$setup_log"
    return "$status"
}
# A failed build still waits for the set-up: an apt-get or npm killed half-way could leave
# the machine's packages or the target directory half-installed.
trap 'finish_setup || true; report' EXIT
step fmt cargo fmt --all --check
# Clippy lints the workspace inside the test build rather than in a `cargo clippy` pass of its
# own. `cargo clippy` only checks, so every dependency (and the guests' build scripts under it)
# was compiled twice, checked and then built. Here clippy's driver compiles the workspace's own
# crates, every target as a test and as a plain build, with `-D warnings`, passed the way
# `cargo clippy -- -D warnings` passes it (each argument followed by `__CLIPPY_HACKERY__`), and
# dependencies go to rustc as usual. The test run keeps the same environment, which cargo's
# fingerprints include, so nothing compiles again. Tests that run cargo inherit it: the proxy
# tests' server is found fresh, and the Rust scaffold of `policy new` must be lint-clean too.
# stock:cedar, a workspace of its own (`policies/stock/cedar/Cargo.toml` says why), is linted by
# the nested build that builds it for wasm32 (`policies/build-support`).
lint=(env "RUSTC_WORKSPACE_WRAPPER=$(rustc --print sysroot)/bin/clippy-driver"
    "CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
# JavaScript and Python policies are built inside the tests (with the componentizers setup.sh
# installs): the scaffolds of `policy new --lang js|python` (host/tests/it/cli.rs) and the
# examples and hostile guests (tests/e2e), their components kept in the target directory.
# A snapshot that differs fails; nothing is written or accepted (`cargo insta review` does that).
step "clippy, build tests" "${lint[@]}" cargo test --workspace --locked --no-run
# Most tests wait on other processes (bwrap, Slurm, MCP servers and clients) more than they
# compute, so the step runs two lanes side by side:
# - the executors' integration tests, about 100 s of waiting on Slurm for 8 s of CPU (a time
#   limit is whole minutes), then the end-to-end tests;
# - every other test binary of the workspace, then the doc tests.
# The deadline tests run last and alone: they measure wall time. The test binaries are run
# as `cargo test` runs them (from their package's directory, with `CARGO_MANIFEST_DIR` set; a
# test of the sandbox's environment checks that it does not leak): `cargo test` runs its binaries
# one after another, and a narrower package selection would build the dependencies again with
# other features. Within a binary, four tests at a time. Every test runs even when one fails;
# the step fails at the end.
test_binaries() { # prints "PACKAGE-DIR TAB NAME TAB EXECUTABLE" for each test binary but hpcgate-tests'
    "${lint[@]}" cargo test --workspace --exclude hpcgate-tests --locked --no-run \
        --message-format=json-render-diagnostics | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["profile"]["test"] and m.get("executable"):
        print(os.path.dirname(m["manifest_path"]), m["target"]["name"], m["executable"], sep="\t")'
}
run_binaries() { # DIR TAB NAME TAB EXECUTABLE lines on stdin: runs each, fails if any failed
    local dir name exe status=0
    while IFS=$'\t' read -r dir name exe; do
        printf '\n     Running %s (%s)\n' "${dir#"$PWD"/}: $name" "$exe"
        (cd "$dir" && "${lint[@]}" INSTA_UPDATE=no CARGO_MANIFEST_DIR="$dir" "$exe" --test-threads 4) \
            </dev/null || status=$?
    done
    return "$status"
}
side_lane() { # the executors' integration tests, then the end-to-end tests
    local status=0 started=$SECONDS
    run_binaries <<<"$executors" || status=$?
    echo "tests: the executors' integration tests took $((SECONDS - started)) s"
    "${lint[@]}" INSTA_UPDATE=no cargo test --workspace --locked --no-fail-fast --test e2e \
        || status=$?
    echo "tests: with the end-to-end tests, $((SECONDS - started)) s"
    return "$status"
}
tests() {
    local status=0 binaries executors side side_log
    binaries="$(test_binaries)"
    executors="$(grep -P "^\Q$PWD/executors\E\tit\t" <<<"$binaries")" \
        || { echo "test.sh: no integration test binary of executors/ among:" "$binaries" >&2; return 1; }
    side_log="$(mktemp)"
    side_lane >"$side_log" 2>&1 &
    side=$!
    grep -vxF "$executors" <<<"$binaries" | run_binaries || status=$?
    "${lint[@]}" INSTA_UPDATE=no cargo test --workspace --exclude hpcgate-tests --locked --doc \
        || status=$?
    wait "$side" || status=$?
    printf '\n%s\n' "---- beside the above: the executors' integration tests, the end-to-end tests ----"
    cat "$side_log"
    rm -f "$side_log"
    "${lint[@]}" INSTA_UPDATE=no cargo test --workspace --locked --no-fail-fast --test deadline \
        || status=$?
    return "$status"
}
step "set-up (beside build)" finish_setup
step "cedar fmt" cargo fmt --manifest-path policies/stock/cedar/Cargo.toml --check
step tests tests
# The official MCP conformance suite against the built gateway, for each spec version it knows.
step conformance scripts/conformance.sh

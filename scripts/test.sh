#!/usr/bin/env bash
# test.sh: every check hpcgate has, from a fresh machine: set-up, format, lints, then the whole
# test suite (unit, integration, attack tables with real bwrap, a real local Slurm cluster, the
# policy engine with real and hostile guests). CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# The proxy tests bind binaries from the target dir into the sandbox, and binds under /tmp are
# refused (the sandbox has its own /tmp): a checkout under /tmp builds into /var/tmp instead.
# /var/tmp is everyone's: the directory must be this user's own (not a link, nobody else's),
# and nobody else may write it, or whoever made it first would choose the binaries this script
# runs. Others may read it: tests run the test binaries as other users (`uds_tenancy`).
if [[ -z "${CARGO_TARGET_DIR:-}" && "$PWD" == /tmp/* ]]; then
    top=/var/tmp/hpcgate-target
    [ -e "$top" ] || [ -L "$top" ] || mkdir -m 0755 "$top"
    if [ -L "$top" ] || [ ! -d "$top" ] || [ "$(stat -c %u "$top")" != "$(id -u)" ]; then
        echo "test.sh: $top is not a directory of this user's: remove it, or set CARGO_TARGET_DIR" >&2
        exit 1
    fi
    chmod go-w "$top"
    export CARGO_TARGET_DIR="$top/$(printf '%s' "$PWD" | sha256sum | cut -c1-16)"
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
# is for the tests, so it runs beside the build, its output kept until it is awaited. Its exit
# status also goes to a file, for the executors' tests, which start before the build ends.
step toolchain scripts/setup.sh --toolchain
setup_log="$(mktemp)"
setup_status="$(mktemp -u)"
(
    status=0
    nice -n 10 scripts/setup.sh --no-toolchain >"$setup_log" 2>&1 || status=$?
    echo "$status" >"$setup_status.part" && mv "$setup_status.part" "$setup_status"
    exit "$status"
) &
setup_pid=$!
executors_pid=
executors_log="$(mktemp)"
# Each test binary's output is also kept here, one file each, for the digest at the end: a CI
# log shown only by its head and tail still says which test failed and why.
results="$(mktemp -d)"
digest() { # the panic of each failed test, at most 30 lines each, after everything else
    local log
    for log in "$results"/*.log; do
        [ -e "$log" ] || continue
        awk -v bin="$(basename "$log" .log)" '
            /^---- .* stdout ----$/ { name = $2; taken = 0; next }
            /^thread .* panicked at / && name != "" { taking = 1; print "test.sh: failed in " bin ": " name }
            taking && (/^note: run with/ || /^---- / || /^failures:$/ || taken >= 30) { taking = 0; name = "" }
            taking { print "  " $0; taken++ }' "$log"
    done
}
finish_setup() { # waits for the set-up beside the build and shows what it said
    local status=0
    [ -n "$setup_pid" ] || return 0
    wait "$setup_pid" || status=$?
    setup_pid=
    cat "$setup_log" >&2
    rm -f "$setup_log"
    return "$status"
}
finish_executors() { # waits for the executors' tests started during the build, shows their output
    local status=0
    [ -n "$executors_pid" ] || return 0
    wait "$executors_pid" || status=$?
    executors_pid=
    printf '\n%s\n' "---- beside the build: the executors' integration tests ----"
    cat "$executors_log"
    return "$status"
}
# A failed build still waits for the set-up and the executors' tests: an apt-get or npm killed
# half-way could leave the machine's packages or the target directory half-installed.
trap 'finish_setup || true; finish_executors || true; digest >&2; rm -rf "$setup_status" "$executors_log" "$results"; report' EXIT
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
#
# The build lists each test binary as soon as it is linked (cargo's JSON messages on stdout,
# its diagnostics rendered on stderr as usual). The executors' integration tests start then,
# beside the rest of the build: they are about 100 s of waiting on Slurm (its time limits are
# whole minutes) for 8 s of CPU, and they need neither the policy guests nor the gateway, which
# the build's last minutes are spent on.
# They also run `hpcgate-supervisor`, which cargo may link after their test binary (it orders
# the two only for running them): the lane starts once both are reported.
binaries=() # "PACKAGE-DIR TAB NAME TAB EXECUTABLE" for each test binary but the executors'
build_tests() {
    local dir name exe status= executors_it= supervisor=
    while IFS=$'\t' read -r dir name exe; do
        if [ "$dir" = exit ]; then
            status="$name"
        elif [ "$dir" = bin ]; then
            [ "$name" != hpcgate-supervisor ] || supervisor=yes
        elif [ "$dir" = "$PWD/executors" ] && [ "$name" = it ]; then
            executors_it="$dir"$'\t'"$name"$'\t'"$exe"
        else
            binaries+=("$dir"$'\t'"$name"$'\t'"$exe")
        fi
        if [ -n "$executors_it" ] && [ -n "$supervisor" ] && [ -z "$executors_pid" ]; then
            executors_lane "$executors_it" </dev/null >"$executors_log" 2>&1 &
            executors_pid=$!
        fi
    done < <(
        status=0
        "${lint[@]}" cargo test --workspace --locked --no-run \
            --message-format=json-render-diagnostics | python3 -u -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if m["profile"]["test"]:
        print(os.path.dirname(m["manifest_path"]), m["target"]["name"], m["executable"], sep="\t")
    elif "bin" in m["target"]["kind"]:
        print("bin", m["target"]["name"], m["executable"], sep="\t")' \
            || status=$?
        printf 'exit\t%s\n' "$status"
    )
    [ "$status" = 0 ] || { echo "test.sh: the build failed" >&2; return 1; }
    [ -n "$executors_pid" ] \
        || { echo "test.sh: the build made no integration test binary of executors/, or no hpcgate-supervisor" >&2; return 1; }
}
# Most tests wait on other processes (bwrap, Slurm, MCP servers and clients) more than they
# compute. Beside the executors' tests, started during the build, the step runs two lanes: the
# end-to-end tests; every other test binary of the workspace, then the doc tests. The deadline
# tests run last and alone: they measure wall time. The test binaries are run as `cargo test`
# runs them (from their package's directory, with `CARGO_MANIFEST_DIR` set; a test of the
# sandbox's environment checks that it does not leak), from the build's list: a narrower
# package selection would build the dependencies again with other features. Within a binary,
# four tests at a time, but for the end-to-end and deadline tests (one per core, libtest's
# default). Every test runs even when one fails; the step fails at the end.
run_binaries() { # [THREADS], DIR TAB NAME TAB EXECUTABLE lines on stdin: runs each, fails if any did
    local dir name exe status=0 threads=()
    [ -z "${1:-}" ] || threads=(--test-threads "$1")
    while IFS=$'\t' read -r dir name exe; do
        printf '\n     Running %s (%s)\n' "${dir#"$PWD"/}: $name" "$exe"
        (cd "$dir" && "${lint[@]}" INSTA_UPDATE=no CARGO_MANIFEST_DIR="$dir" "$exe" "${threads[@]}") \
            </dev/null 2>&1 | tee "$results/$(basename "$exe").log" || status=$?
    done
    return "$status"
}
executors_lane() { # LINE: waits for the set-up (Slurm, bwrap), then runs the executors' tests
    local started=$SECONDS
    until [ -e "$setup_status" ]; do sleep 1; done
    [ "$(cat "$setup_status")" = 0 ] || { echo "test.sh: the set-up failed: no executors' tests"; return 1; }
    echo "tests: the executors' integration tests waited $((SECONDS - started)) s for the set-up"
    run_binaries 4 <<<"$1" || return 1
    echo "tests: the executors' integration tests took $((SECONDS - started)) s with the wait"
}
step "clippy, build tests" build_tests
binary() { # NAME: the list's line for tests/NAME (hpcgate-tests' binaries)
    printf '%s\n' "${binaries[@]}" | grep -P "^\Q$PWD/tests\E\t$1\t" \
        || { echo "test.sh: no test binary tests/$1 in the build's list" >&2; return 1; }
}
tests() {
    local status=0 e2e deadline side side_log started=$SECONDS
    e2e="$(binary e2e)" && deadline="$(binary deadline)" || return 1
    side_log="$(mktemp)"
    (
        run_binaries <<<"$e2e" || status=$?
        echo "tests: the end-to-end tests took $((SECONDS - started)) s"
        exit "$status"
    ) >"$side_log" 2>&1 &
    side=$!
    printf '%s\n' "${binaries[@]}" | grep -vxF -e "$e2e" -e "$deadline" | run_binaries 4 || status=$?
    # `--doc` tests every library of the selection, `doctest = false` or not: `stock:rego` (built
    # only for wasm32) is left out, or `regorus` would be built natively for it. The features the
    # selection resolves stay the build's (`policies/build-support/Cargo.toml`).
    "${lint[@]}" INSTA_UPDATE=no cargo test --workspace --exclude hpcgate-tests --exclude rego \
        --locked --doc || status=$?
    echo "tests: the unit and integration tests took $((SECONDS - started)) s"
    wait "$side" || status=$?
    printf '\n%s\n' "---- beside the above: the end-to-end tests ----"
    cat "$side_log"
    rm -f "$side_log"
    finish_executors || status=$?
    run_binaries <<<"$deadline" || status=$?
    return "$status"
}
step "set-up (beside build)" finish_setup
step "cedar fmt" cargo fmt --manifest-path policies/stock/cedar/Cargo.toml --check
step tests tests
# The official MCP conformance suite against the built gateway, for each spec version it knows.
step conformance scripts/conformance.sh

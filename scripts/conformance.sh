#!/usr/bin/env bash
# conformance.sh: the official MCP conformance suite (@modelcontextprotocol/conformance, server
# scenarios) against a fresh `hpcgate run --transport streamable-http` on loopback: 0.1.16 (the
# release) for each spec version it knows, 2025-06-18 and 2025-11-25, and 0.2.0-alpha.12 for
# 2026-07-28, which only that pre-release knows. Scenarios that do not apply, and why:
# tests/conformance/expected-failures*.yml. scripts/setup.sh installs the suites and Node 22
# (the npm `node` package) into the target directory; the hpcgate binary is the debug build.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
suite="$target/conformance/node_modules/.bin"
next="$target/conformance-next/node_modules/@modelcontextprotocol/conformance/dist/index.js"
hpcgate="$target/debug/hpcgate"
[ -x "$suite/conformance" ] && [ -f "$next" ] || { echo "conformance: run scripts/setup.sh first" >&2; exit 1; }
[ -x "$hpcgate" ] || cargo build -p hpcgate --locked
# The suite runs on the Node 22 it was installed with, whatever node the system has.
export PATH="$suite:$PATH"

work="$(mktemp -d "${TMPDIR:-/tmp}/hpcgate-conformance-XXXXXX")"
gateway=
cleanup() {
    if [ -n "$gateway" ]; then kill "$gateway" 2>/dev/null || true; wait "$gateway" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
printf 'state_dir = "%s/state"\n' "$work" > "$work/gateway.toml"
HOME="$work/home" "$hpcgate" run --config "$work/gateway.toml" --transport streamable-http \
    --port 0 2> "$work/stderr" < /dev/null > /dev/null &
gateway=$!
url=
for _ in $(seq 1 600); do
    url="$(sed -n 's/^hpcgate: listening on \(http[^ ]*\).*/\1/p' "$work/stderr" | head -n 1)"
    [ -n "$url" ] && break
    kill -0 "$gateway" 2>/dev/null || { cat "$work/stderr" >&2; exit 1; }
    sleep 0.1
done
[ -n "$url" ] || { echo "conformance: hpcgate did not listen within 60 s" >&2; cat "$work/stderr" >&2; exit 1; }
baselines="$PWD/tests/conformance"
run() { # VERSION BASELINE COMMAND...
    local version="$1" baseline="$2"
    shift 2
    echo "conformance: server scenarios of $version against $url"
    (cd "$work" && "$@" server --url "$url" --spec-version "$version" \
        --expected-failures "$baseline") > "$work/conformance-$version.log" 2>&1 \
        || { cat "$work/conformance-$version.log" >&2; echo "conformance: $version failed" >&2; exit 1; }
    sed -n '/=== SUMMARY ===/,$p' "$work/conformance-$version.log"
}
run 2025-06-18 "$baselines/expected-failures.yml" conformance
run 2025-11-25 "$baselines/expected-failures.yml" conformance
run 2026-07-28 "$baselines/expected-failures-2026-07-28.yml" node "$next"

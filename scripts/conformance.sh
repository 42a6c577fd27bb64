#!/usr/bin/env bash
# conformance.sh: the official MCP conformance suite (@modelcontextprotocol/conformance, server
# scenarios) against a fresh `hpcgate run --transport streamable-http` on loopback, for each
# spec version the suite knows. Scenarios that do not apply, and why: tests/conformance/
# expected-failures.yml. scripts/setup.sh installs the suite and Node 22 (the npm `node`
# package) into the target directory; the hpcgate binary is the debug build (`cargo build`).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
suite="$target/conformance/node_modules/.bin"
hpcgate="$target/debug/hpcgate"
[ -x "$suite/conformance" ] || { echo "conformance: run scripts/setup.sh first" >&2; exit 1; }
[ -x "$hpcgate" ] || cargo build -p hpcgate --locked
# The suite runs on the Node 22 it was installed with, whatever node the system has.
export PATH="$PWD/$suite:$PATH"

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
for version in 2025-06-18 2025-11-25; do
    echo "conformance: server scenarios of $version against $url"
    (cd "$work" && conformance server --url "$url" --spec-version "$version" \
        --expected-failures "$OLDPWD/tests/conformance/expected-failures.yml") \
        > "$work/conformance-$version.log" 2>&1 \
        || { cat "$work/conformance-$version.log" >&2; echo "conformance: $version failed" >&2; exit 1; }
    sed -n '/=== SUMMARY ===/,$p' "$work/conformance-$version.log"
done

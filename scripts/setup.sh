#!/usr/bin/env bash
# setup.sh [--no-slurm | --toolchain | --no-toolchain]: install what hpcgate's build and tests
# need, idempotently, on a Debian machine with rustup. Safe to run again: it only installs what
# is missing. Everything it says goes to stderr (scripts/run.sh keeps stdout for the MCP stream).
# `--toolchain` installs only the Rust toolchain (what the build needs), `--no-toolchain` all but
# it (what only the tests need): scripts/test.sh runs the second beside the build.
#
#   Debian packages: bubblewrap (the sandbox), slurm-wlm + munge (the local test cluster; not
#   with --no-slurm), openssl (makes the JWT test keys at test time; not with --no-slurm),
#   prometheus (scrapes the gateway in the metrics tests, with promtool; not with --no-slurm),
#   rpm (rpmbuild, for the package test; not with --no-slurm)
#   curl, litmus and rclone (the WebDAV tests' clients; not with --no-slurm)
#   Rust: the toolchain and wasm32 targets pinned in rust-toolchain.toml, clippy, rustfmt
#   Python: the official MCP SDK (PyPI `mcp`) and the OTLP classes (`opentelemetry-proto`, for
#   the traces test) in target/python-mcp, for the tests (not with
#   --no-slurm, which is the run script's minimal set-up)
#   npm: @modelcontextprotocol/server-filesystem (pinned) in target/mcp-filesystem, for the proxy
#   tests; @modelcontextprotocol/conformance and Node 22 (the npm `node` package: the suite
#   needs Node 22, Debian's may be older), pinned, in target/conformance, and its
#   0.2.0-alpha.12 (the 2026-07-28 revision) in target/conformance-next, for
#   scripts/conformance.sh (none with --no-slurm)
#   npm: the official TypeScript MCP clients (@modelcontextprotocol/sdk 1.x,
#   @modelcontextprotocol/client 2.x, the MCP Inspector CLI) and Node 22, pinned with their
#   dependencies by tests/clients/ts's lock file, in target/ts-clients (not with --no-slurm)
#   JS and Python policies: jco (npm, pinned with its dependencies by scripts/policy-js's lock
#   file) in target/policy-js, componentize-py (PyPI, pinned) in target/policy-py, which
#   scripts/componentize.sh and the tests build JavaScript and Python policies with (not with
#   --no-slurm)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup: %s\n' "$*" >&2; }
exec 1>&2
slurm=yes packages=yes toolchain=yes
case "${1:-}" in
    "") ;;
    --no-slurm) slurm=no ;;
    --toolchain) slurm=no packages=no ;;
    --no-toolchain) toolchain=no ;;
    *) log "unknown option $1; usage: setup.sh [--no-slurm | --toolchain | --no-toolchain]"; exit 2 ;;
esac

missing=()
if [ "$packages" = yes ]; then
    command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
    # `hpcgate audit bench --records N` measures each command's peak RSS with GNU time
    [ -x /usr/bin/time ] || missing+=(time)
fi
if [ "$slurm" = yes ]; then
    { command -v sbatch >/dev/null 2>&1 && [ -x /usr/sbin/slurmctld ]; } || missing+=(slurm-wlm)
    [ -x /usr/sbin/munged ] || missing+=(munge)
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    # a real Prometheus scrapes the gateway in the metrics tests; promtool checks the exposition
    { command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || missing+=(prometheus)
    # the package test builds an .rpm beside the .deb
    command -v rpmbuild >/dev/null 2>&1 || missing+=(rpm)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    command -v litmus >/dev/null 2>&1 || missing+=(litmus)
    command -v rclone >/dev/null 2>&1 || missing+=(rclone)
fi
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        log "missing Debian packages: ${missing[*]}; run: sudo apt-get install ${missing[*]}"
        exit 1
    fi
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$toolchain" = yes ]; then
    command -v rustup >/dev/null 2>&1 || { log "rustup is required: https://rustup.rs"; exit 1; }
    # rust-toolchain.toml names the toolchain, components and wasm target; installing it is a
    # no-op when present.
    rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install
    channel="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)"
    for target in wasm32-unknown-unknown wasm32-wasip2; do
        rustup target add --toolchain "$channel" "$target" >/dev/null 2>&1 \
            || { log "cannot add the $target target to $channel"; exit 1; }
    done
    rustup component add --toolchain "$channel" clippy rustfmt >/dev/null 2>&1 \
        || { log "cannot add clippy and rustfmt to $channel"; exit 1; }
fi
# The official Python MCP SDK, a third-party client for the end-to-end tests, in a venv inside
# the target directory (the tests look for it there).
if [ "$slurm" = yes ]; then
    venv="${CARGO_TARGET_DIR:-target}/python-mcp"
    # opentelemetry-proto: the official OTLP classes, which decode the gateway's trace exports
    # (tests/python/otlp_receiver.py).
    if ! "$venv/bin/python" -c 'import mcp, opentelemetry.proto' >/dev/null 2>&1; then
        log "installing the Python MCP SDK and the OTLP classes into $venv"
        [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" \
            || { log "python3 -m venv failed: apt-get install python3-venv"; exit 1; }
        "$venv/bin/pip" install -q "mcp==2.3.0" "opentelemetry-proto==1.45.2" \
            || { log "pip install mcp==2.3.0 opentelemetry-proto==1.45.2 failed"; exit 1; }
    fi
    # mcp 1.x beside it: the generation that still has the legacy HTTP+SSE client
    # (host/tests/it/mcp_sse.rs).
    venv1="${CARGO_TARGET_DIR:-target}/python-mcp1"
    if ! "$venv1/bin/python" -c 'import mcp.client.sse' >/dev/null 2>&1; then
        log "installing the Python MCP SDK 1.x into $venv1"
        python3 -m venv "$venv1" || { log "python3 -m venv failed: apt-get install python3-venv"; exit 1; }
        "$venv1/bin/pip" install -q "mcp==1.30.0" || { log "pip install mcp==1.30.0 failed"; exit 1; }
    fi
fi
# The npm filesystem MCP server, pinned, for the proxy tests (host/tests/it/proxy_filesystem.rs),
# in the target directory (the tests look for it there). node runs it inside bwrap.
if [ "$slurm" = yes ]; then
    fs_mcp="${CARGO_TARGET_DIR:-target}/mcp-filesystem"
    fs_version="2026.8.31"
    fs_pkg="$fs_mcp/node_modules/@modelcontextprotocol/server-filesystem/package.json"
    if ! grep -q "\"version\": \"$fs_version\"" "$fs_pkg" 2>/dev/null; then
        command -v npm >/dev/null 2>&1 || { log "npm is required: apt-get install nodejs npm"; exit 1; }
        log "installing @modelcontextprotocol/server-filesystem@$fs_version into $fs_mcp"
        npm install --prefix "$fs_mcp" --no-audit --no-fund --silent \
            "@modelcontextprotocol/server-filesystem@$fs_version" >/dev/null \
            || { log "npm install of the filesystem MCP server failed"; exit 1; }
    fi
fi
# The official MCP conformance suite and the Node 22 it runs on, pinned, for
# scripts/conformance.sh.
if [ "$slurm" = yes ]; then
    conformance="${CARGO_TARGET_DIR:-target}/conformance"
    suite_version="0.1.16"
    node_version="22.23.3"
    suite_pkg="$conformance/node_modules/@modelcontextprotocol/conformance/package.json"
    if ! grep -q "\"version\": \"$suite_version\"" "$suite_pkg" 2>/dev/null \
        || [ "$("$conformance/node_modules/.bin/node" --version 2>/dev/null)" != "v$node_version" ]; then
        command -v npm >/dev/null 2>&1 || { log "npm is required: apt-get install nodejs npm"; exit 1; }
        log "installing @modelcontextprotocol/conformance@$suite_version and node@$node_version into $conformance"
        npm install --prefix "$conformance" --no-audit --no-fund --silent \
            "@modelcontextprotocol/conformance@$suite_version" "node@$node_version" >/dev/null \
            || { log "npm install of the conformance suite failed"; exit 1; }
    fi
    # The pre-release that knows the 2026-07-28 revision, beside it (one version per prefix).
    next_version="0.2.0-alpha.12"
    next_pkg="${conformance}-next/node_modules/@modelcontextprotocol/conformance/package.json"
    if ! grep -q "\"version\": \"$next_version\"" "$next_pkg" 2>/dev/null; then
        log "installing @modelcontextprotocol/conformance@$next_version into ${conformance}-next"
        npm install --prefix "${conformance}-next" --no-audit --no-fund --silent \
            "@modelcontextprotocol/conformance@$next_version" >/dev/null \
            || { log "npm install of the conformance suite ($next_version) failed"; exit 1; }
    fi
fi
# The official TypeScript MCP clients (the SDK 1.x, the SDK 2.x client, the MCP Inspector CLI)
# and the Node 22 the Inspector needs, pinned with their dependencies by tests/clients/ts's lock
# file, in the target directory (host/tests/it/mcp_typescript.rs looks for them there).
if [ "$slurm" = yes ]; then
    ts_clients="${CARGO_TARGET_DIR:-target}/ts-clients"
    if ! cmp -s tests/clients/ts/package-lock.json "$ts_clients/package-lock.json" \
        || [ ! -x "$ts_clients/node_modules/.bin/mcp-inspector" ] \
        || ! "$ts_clients/node_modules/.bin/node" --version >/dev/null 2>&1; then
        command -v npm >/dev/null 2>&1 || { log "npm is required: apt-get install nodejs npm"; exit 1; }
        log "installing the TypeScript MCP clients (tests/clients/ts/package-lock.json) into $ts_clients"
        mkdir -p "$ts_clients"
        cp tests/clients/ts/package.json tests/clients/ts/package-lock.json "$ts_clients/"
        # a failed install must not look current to the next run
        npm ci --prefix "$ts_clients" --no-audit --no-fund --silent >/dev/null \
            || { rm -f "$ts_clients/package-lock.json"; log "npm ci of the TypeScript MCP clients failed"; exit 1; }
    fi
fi
# The componentizers of JavaScript and Python policies (scripts/componentize.sh, the scaffolds of
# `hpcgate policy new --lang js|python`), in the target directory (the tests look for them there).
if [ "$slurm" = yes ]; then
    policy_js="${CARGO_TARGET_DIR:-target}/policy-js"
    if ! cmp -s scripts/policy-js/package-lock.json "$policy_js/package-lock.json" \
        || [ ! -x "$policy_js/node_modules/.bin/jco" ]; then
        command -v npm >/dev/null 2>&1 || { log "npm is required: apt-get install nodejs npm"; exit 1; }
        log "installing jco (scripts/policy-js/package-lock.json) into $policy_js"
        mkdir -p "$policy_js"
        cp scripts/policy-js/package.json scripts/policy-js/package-lock.json "$policy_js/"
        npm ci --prefix "$policy_js" --no-audit --no-fund --silent >/dev/null \
            || { log "npm ci of jco failed"; exit 1; }
    fi
    policy_py="${CARGO_TARGET_DIR:-target}/policy-py"
    cpy_version="0.25.1"
    if ! "$policy_py/bin/componentize-py" --version 2>/dev/null | grep -qx "componentize-py $cpy_version"; then
        log "installing componentize-py $cpy_version into $policy_py"
        python3 -m venv "$policy_py" || { log "python3 -m venv failed: apt-get install python3-venv"; exit 1; }
        "$policy_py/bin/pip" install -q "componentize-py==$cpy_version" \
            || { log "pip install componentize-py==$cpy_version failed"; exit 1; }
    fi
fi
log "ready"

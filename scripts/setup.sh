#!/usr/bin/env bash
# setup.sh [--no-slurm]: install what hpcgate's build and tests need, idempotently, on a Debian
# machine with rustup. Safe to run again: it only installs what is missing. Everything it says
# goes to stderr (scripts/run.sh keeps stdout for the MCP stream).
#
#   Debian packages: bubblewrap (the sandbox), slurm-wlm + munge (the local test cluster; not
#   with --no-slurm), openssl (makes the JWT test keys at test time; not with --no-slurm),
#   prometheus (scrapes the gateway in the metrics tests, with promtool; not with --no-slurm),
#   rpm (rpmbuild, for the package test; not with --no-slurm)
#   curl, litmus and rclone (the WebDAV tests' clients; not with --no-slurm)
#   Rust: the toolchain and wasm32 targets pinned in rust-toolchain.toml, clippy, rustfmt
#   Python: the official MCP SDK (PyPI `mcp`) in target/python-mcp, for the tests (not with
#   --no-slurm, which is the run script's minimal set-up)
#   npm: @modelcontextprotocol/server-filesystem (pinned) in target/mcp-filesystem, for the proxy
#   tests (not with --no-slurm)
#   JS and Python policies: jco (npm, pinned with its dependencies by scripts/policy-js's lock
#   file) in target/policy-js, componentize-py (PyPI, pinned) in target/policy-py, which
#   scripts/componentize.sh and the tests build JavaScript and Python policies with (not with
#   --no-slurm)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'setup: %s\n' "$*" >&2; }
exec 1>&2
slurm=yes
[ "${1:-}" = "--no-slurm" ] && slurm=no

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
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

command -v rustup >/dev/null 2>&1 || { log "rustup is required: https://rustup.rs"; exit 1; }
# rust-toolchain.toml names the toolchain, components and wasm target; installing it is a no-op
# when present.
rustup show active-toolchain >/dev/null 2>&1 || rustup toolchain install
toolchain="$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)"
for target in wasm32-unknown-unknown wasm32-wasip2; do
    rustup target add --toolchain "$toolchain" "$target" >/dev/null 2>&1 \
        || { log "cannot add the $target target to $toolchain"; exit 1; }
done
rustup component add --toolchain "$toolchain" clippy rustfmt >/dev/null 2>&1 \
    || { log "cannot add clippy and rustfmt to $toolchain"; exit 1; }
# The official Python MCP SDK, a third-party client for the end-to-end tests, in a venv inside
# the target directory (the tests look for it there).
if [ "$slurm" = yes ]; then
    venv="${CARGO_TARGET_DIR:-target}/python-mcp"
    if ! "$venv/bin/python" -c 'import mcp' >/dev/null 2>&1; then
        log "installing the Python MCP SDK into $venv"
        python3 -m venv "$venv" || { log "python3 -m venv failed: apt-get install python3-venv"; exit 1; }
        "$venv/bin/pip" install -q "mcp==2.3.0" || { log "pip install mcp==2.3.0 failed"; exit 1; }
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

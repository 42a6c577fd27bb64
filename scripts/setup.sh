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
#   Every client below is pinned with all its dependencies by a file in the repository (npm
#   lock files, pip requirements with every package's version), so a new release of something
#   they depend on cannot change what the tests run against:
#   Python: the official MCP SDK (PyPI `mcp` 2.x) and the OTLP classes (`opentelemetry-proto`,
#   for the traces test) in target/python-mcp, and `mcp` 1.x (its legacy SSE client) in
#   target/python-mcp1 (tests/clients/python/mcp2.txt, mcp1.txt)
#   npm: @modelcontextprotocol/server-filesystem in target/mcp-filesystem, for the proxy tests
#   (tests/clients/filesystem); @modelcontextprotocol/conformance and Node 22 (the npm `node`
#   package: the suite needs Node 22, Debian's may be older) in target/conformance, and its
#   0.2.0 pre-release (the 2026-07-28 revision) in target/conformance-next, for
#   scripts/conformance.sh (tests/clients/conformance, conformance-next)
#   npm: the official TypeScript MCP clients (@modelcontextprotocol/sdk 1.x,
#   @modelcontextprotocol/client 2.x, the MCP Inspector CLI) and Node 22 in target/ts-clients
#   (tests/clients/ts)
#   JS and Python policies: jco (npm, scripts/policy-js) in target/policy-js, componentize-py
#   (PyPI, scripts/policy-py/requirements.txt) in target/policy-py, which
#   scripts/componentize.sh and the tests build JavaScript and Python policies with
#   None of the clients is installed with --no-slurm (the run script's minimal set-up).
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
# Pinned clients in the target directory, where the tests look for them. Each is installed
# afresh unless its stamp (`.pinned`: its pin files, and for Python the interpreter's version)
# says it is current; the stamp is written once the install succeeded, so an install that
# failed or was interrupted is tried again.
target="${CARGO_TARGET_DIR:-target}"
npm_pinned() { # NAME SOURCE-DIR INSTALL-DIR: `npm ci` of SOURCE-DIR's package.json and lock
    local name="$1" from="$2" into="$3"
    # The stamp is written only once `npm ci` succeeded: an interrupted install is not current.
    cat "$from/package.json" "$from/package-lock.json" | cmp -s - "$into/.pinned" && return 0
    command -v npm >/dev/null 2>&1 || { log "npm is required: apt-get install nodejs npm"; exit 1; }
    log "installing $name ($from/package-lock.json) into $into"
    rm -rf "$into" && mkdir -p "$into"
    cp "$from/package.json" "$from/package-lock.json" "$into/"
    npm ci --prefix "$into" --no-audit --no-fund --silent >/dev/null \
        || { log "npm ci of $name failed"; exit 1; }
    cat "$from/package.json" "$from/package-lock.json" >"$into/.pinned"
}
pip_pinned() { # NAME REQUIREMENTS VENV: a venv with exactly the packages REQUIREMENTS lists
    local name="$1" pins="$2" venv="$3"
    # The stamp names the Python too: a venv of another Python is made again.
    { python3 --version; cat "$pins"; } | cmp -s - "$venv/.pinned" && return 0
    log "installing $name ($pins) into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv" || { log "python3 -m venv failed: apt-get install python3-venv"; exit 1; }
    # Every dependency is in the file, and only built wheels are taken: nothing is resolved or
    # compiled, so nothing newer comes in.
    "$venv/bin/pip" install -q --no-deps --only-binary :all: -r "$pins" >&2 \
        && "$venv/bin/pip" check >&2 || { log "pip install of $name failed"; exit 1; }
    { python3 --version; cat "$pins"; } >"$venv/.pinned"
}
if [ "$slurm" = yes ]; then
    # The official Python MCP SDK, a third-party client for the end-to-end tests, with the OTLP
    # classes that decode the gateway's trace exports (tests/python/otlp_receiver.py); and
    # mcp 1.x, the generation that still has the legacy HTTP+SSE client
    # (host/tests/it/mcp_sse.rs).
    pip_pinned "the Python MCP SDK" tests/clients/python/mcp2.txt "$target/python-mcp"
    pip_pinned "the Python MCP SDK 1.x" tests/clients/python/mcp1.txt "$target/python-mcp1"
    # The npm filesystem MCP server for the proxy tests (host/tests/it/proxy_filesystem.rs);
    # node runs it inside bwrap.
    npm_pinned "@modelcontextprotocol/server-filesystem" tests/clients/filesystem \
        "$target/mcp-filesystem"
    # The official MCP conformance suite and the Node 22 it runs on, for
    # scripts/conformance.sh; and the pre-release that knows the 2026-07-28 revision.
    npm_pinned "the MCP conformance suite" tests/clients/conformance "$target/conformance"
    npm_pinned "the MCP conformance suite (pre-release)" tests/clients/conformance-next \
        "$target/conformance-next"
    # The official TypeScript MCP clients and the Node 22 the Inspector needs
    # (host/tests/it/mcp_typescript.rs).
    npm_pinned "the TypeScript MCP clients" tests/clients/ts "$target/ts-clients"
    # The componentizers of JavaScript and Python policies (scripts/componentize.sh, the
    # scaffolds of `hpcgate policy new --lang js|python`).
    npm_pinned "jco" scripts/policy-js "$target/policy-js"
    pip_pinned "componentize-py" scripts/policy-py/requirements.txt "$target/policy-py"
fi
log "ready"

#!/bin/sh
# build.sh: policy.js -> policy.wasm, a component of the hpcgate policy world (wit/policy.wit).
#
# jco's QuickJS backend, synchronous, with every WASI import replaced by a trap
# (`--backend-qjs-stub-wasi`): the component imports the hpcgate world and nothing else, so it is
# pure by construction, and it stays small (about 1.6 MB) so hpcgate compiles it quickly.
# jco: $JCO, else ./node_modules/.bin/jco (`npm install` here installs the pinned version), else
# `jco` on the PATH.
set -eu
cd "$(dirname "$0")"
jco="${JCO:-}"
if [ -z "$jco" ]; then
    if [ -x node_modules/.bin/jco ]; then
        jco=node_modules/.bin/jco
    elif command -v jco >/dev/null 2>&1; then
        jco=jco
    else
        echo "build.sh: jco not found: run \`npm install\` in $(pwd) (package.json pins it), or set JCO=/path/to/jco" >&2
        exit 1
    fi
fi
"$jco" componentize policy.js --wit wit --world-name policy \
    --backend quickjs --backend-qjs-disable-async --backend-qjs-stub-wasi \
    --out policy.wasm

#!/bin/sh
# build.sh: app.py -> policy.wasm, a component of the hpcgate policy world (wit/policy.wit).
#
# `componentize-py --stub-wasi` replaces every WASI import with a trap: the component imports
# the hpcgate world and nothing else, so it is pure by construction (without it, the component
# would import `wasi:sockets`, which hpcgate refuses at load).
# componentize-py: $COMPONENTIZE_PY, else .venv/bin/componentize-py
# (`python3 -m venv .venv && .venv/bin/pip install -r requirements.txt` installs the pinned
# version), else `componentize-py` on the PATH.
set -eu
cd "$(dirname "$0")"
cpy="${COMPONENTIZE_PY:-}"
if [ -z "$cpy" ]; then
    if [ -x .venv/bin/componentize-py ]; then
        cpy=.venv/bin/componentize-py
    elif command -v componentize-py >/dev/null 2>&1; then
        cpy=componentize-py
    else
        echo "build.sh: componentize-py not found: run \`python3 -m venv .venv && .venv/bin/pip install -r requirements.txt\` in $(pwd), or set COMPONENTIZE_PY=/path/to/componentize-py" >&2
        exit 1
    fi
fi
"$cpy" --quiet --wit-path wit --world policy componentize app --stub-wasi --output policy.wasm

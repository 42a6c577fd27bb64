#!/bin/sh
# componentize.sh js|python SOURCE OUT [--keep-wasi]: builds a JavaScript or Python policy into a component of
# the hpcgate policy world (wit/), as the scaffolds of `hpcgate policy new --lang js|python` do:
#
#   js:     jco componentize, QuickJS backend, synchronous, every WASI import a trap
#   python: componentize-py componentize --stub-wasi (SOURCE is one module file, e.g. rules.py)
#
# so the component imports the hpcgate world and nothing else. `--keep-wasi` keeps the WASI
# imports instead (the tests of what the host links for them: a deterministic, capability-free
# WASI for JS; a refusal at load for Python, which imports `wasi:sockets`). The tools are the pinned ones
# scripts/setup.sh installs: $JCO, else <target>/policy-js/node_modules/.bin/jco; $COMPONENTIZE_PY,
# else <target>/policy-py/bin/componentize-py (<target> is $CARGO_TARGET_DIR or ./target).
set -eu
[ $# -eq 3 ] || { [ $# -eq 4 ] && [ "$4" = --keep-wasi ]; } \
    || { echo "usage: $0 js|python SOURCE OUT [--keep-wasi]" >&2; exit 2; }
stub=yes
[ $# -eq 4 ] && stub=no
lang="$1"
[ -f "$2" ] || { echo "componentize.sh: $2 is not a file" >&2; exit 2; }
source="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
out="$3"
repo="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$repo/target}"
case "$lang" in
js)
    jco="${JCO:-$target/policy-js/node_modules/.bin/jco}"
    [ -x "$jco" ] || { echo "componentize.sh: $jco is missing: run scripts/setup.sh" >&2; exit 1; }
    set -- --backend quickjs --backend-qjs-disable-async
    [ "$stub" = yes ] && set -- "$@" --backend-qjs-stub-wasi
    "$jco" componentize "$source" --wit "$repo/wit" --world-name policy "$@" --out "$out" >/dev/null
    ;;
python)
    cpy="${COMPONENTIZE_PY:-$target/policy-py/bin/componentize-py}"
    [ -x "$cpy" ] || { echo "componentize.sh: $cpy is missing: run scripts/setup.sh" >&2; exit 1; }
    module="$(basename "$source" .py)"
    # Built from a copy: componentize-py leaves `__pycache__` beside the module it imports, and
    # the source tree stays clean (the build scripts watch it).
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    cp "$source" "$work/"
    set --
    [ "$stub" = yes ] && set -- --stub-wasi
    "$cpy" --quiet --wit-path "$repo/wit" --world policy \
        componentize "$module" --python-path "$work" "$@" --output "$out"
    ;;
*)
    echo "componentize.sh: unknown language \`$lang\`; use js or python" >&2
    exit 2
    ;;
esac

#!/bin/sh
# test.sh: builds the component, checks that hpcgate loads it with the config of policy.toml, and
# runs the cases of cases.jsonl through it (`hpcgate policy test`). hpcgate: $HPCGATE, else
# `hpcgate` on the PATH.
set -eu
cd "$(dirname "$0")"
hpcgate="${HPCGATE:-hpcgate}"
./build.sh
"$hpcgate" policy check policy.wasm --settings '{"forbidden": ["rm -rf"]}'
"$hpcgate" policy test --config policy.toml --calls cases.jsonl

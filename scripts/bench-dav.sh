#!/usr/bin/env bash
# bench-dav.sh [ARGS…]: `hpcgate bench dav` in a release build, side by side with the reference
# system's WebDAV server (PyPI wsgidav + cheroot, pinned, installed into target/wsgidav).
# Extra arguments go to the bench (e.g. --size-mb 256 --json).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
venv="$target/wsgidav"
if ! "$venv/bin/wsgidav" --version >/dev/null 2>&1; then
    echo "bench-dav: installing wsgidav 4.4.0 + cheroot 11.1.2 into $venv" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "wsgidav==4.4.0" "cheroot==11.1.2"
fi
cargo build --release --locked -p hpcgate >&2
exec "$target/release/hpcgate" bench dav --wsgidav "$venv/bin/wsgidav" "$@"

#!/usr/bin/env bash
# The main job: set up, build, then run `deepinfer` with the given arguments.
# Without arguments it serves the embedded model (assets/models/deepinfer-mini-v41) on
# http://127.0.0.1:8000 until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >&2
scripts/build.sh build >&2
[ $# -gt 0 ] || set -- serve
exec build/deepinfer "$@"

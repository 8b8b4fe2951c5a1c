#!/usr/bin/env bash
# The main job: set up, build, then run `deepinfer` with the given arguments.
# Without arguments it tokenizes a sample sentence with the bundled DeepSeek-V4.1 tokenizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >&2
scripts/build.sh build >&2
if [ $# -eq 0 ]; then
  echo "Hello, DeepSeek! 你好，世界 🙂" | build/deepinfer tokenize
else
  exec build/deepinfer "$@"
fi

#!/usr/bin/env bash
# serve, generate and inspect without a model folder use the embedded model; when the assets hold
# none, they stop with exit 1 and name the folder they looked in.
source "$(dirname "$0")/lib.sh"
empty=$(mktemp -d)
trap 'rm -rf "$empty"' EXIT
missing="$empty/models/deepinfer-mini-v41"

# stderr of a command run with an assets folder that has no models/.
without_model() { DEEPINFER_ASSET_DIR="$empty" "$DEEPINFER" "$@" 2>&1 >/dev/null </dev/null; }

DEEPINFER_ASSET_DIR="$empty" expect_exit "serve without the embedded model" 1 "$DEEPINFER" serve --port 0
DEEPINFER_ASSET_DIR="$empty" expect_exit "generate without the embedded model" 1 "$DEEPINFER" generate --prompt hi
DEEPINFER_ASSET_DIR="$empty" expect_exit "inspect without the embedded model" 1 "$DEEPINFER" inspect
expect_eq "serve names the missing folder and --model" \
  "$(without_model serve --port 0 | grep -F "$missing/config.json" | grep -c -- '--model DIR')" "1"
expect_eq "generate names the missing folder and --model" \
  "$(without_model generate --prompt hi | grep -F "$missing/config.json" | grep -c -- '--model DIR')" "1"
expect_eq "inspect names the missing folder and MODEL_DIR" \
  "$(without_model inspect | grep -F "$missing/config.json" | grep -c 'MODEL_DIR')" "1"
DEEPINFER_ASSET_DIR="$empty" expect_exit "a bad command line is still a usage error" 2 "$DEEPINFER" serve --port many
finish

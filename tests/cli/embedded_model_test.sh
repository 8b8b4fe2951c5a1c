#!/usr/bin/env bash
# The embedded model end to end: serve, generate and inspect with no model folder use it, and it
# answers a chat request with thinking enabled in DeepSeek's format (reasoning, then an answer).
source "$(dirname "$0")/lib.sh"
embedded="$DEEPINFER_ASSET_DIR/models/deepinfer-mini-v41"
if [ ! -f "$embedded/config.json" ]; then
  echo "SKIP: $embedded/config.json is absent (the embedded model is not in this checkout)"
  exit 77
fi
log="${TMPDIR:-/tmp}/deepinfer_embedded_model_test.$$"

expect_eq "inspect defaults to the embedded model" "$("$DEEPINFER" inspect | sed -n 1p | grep -c 'models/deepinfer-mini-v41$')" "1"
expect_exit "the embedded checkpoint is complete" 0 "$DEEPINFER" inspect
expect_eq "generate defaults to the embedded model" \
  "$("$DEEPINFER" generate --prompt 'What is 47 + 38?' --max-tokens 2 --json | grep -c '"finish_reason"')" "1"

"$DEEPINFER" serve --port 0 --cache-memory 64M >"$log" 2>"$log.err" &
pid=$!
port=$(listening_port "$log")
expect_eq "serve defaults to the embedded model" "$(grep -c 'model "deepinfer-mini-v41" from .*models/deepinfer-mini-v41 (V4.1' "$log")" "1"
expect_eq "/v1/models lists it" \
  "$(curl -s "http://127.0.0.1:$port/v1/models" | grep -c '"id":"deepinfer-mini-v41"')" "1"
chat=$(curl -s -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/chat/completions" -d '{
  "model": "deepinfer-mini-v41", "messages": [{"role": "user", "content": "What is 47 + 38?"}],
  "thinking": {"type": "enabled"}, "max_tokens": 200, "temperature": 0}')
expect_eq "thinking gives reasoning_content" "$(echo "$chat" | grep -c '"reasoning_content":"[^"]')" "1"
expect_eq "and then an answer" "$(echo "$chat" | grep -c '"content":"[^"]')" "1"
kill -TERM "$pid"
wait "$pid"
expect_eq "SIGTERM exits 0" "$?" "0"
[ "$failures" -eq 0 ] || { echo "response: $chat"; sed 's/^/  stderr: /' "$log.err"; }
rm -f "$log" "$log.err"
finish

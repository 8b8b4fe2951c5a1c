#!/usr/bin/env bash
# `deepinfer serve` end to end: start on a free port, answer /health and a completion, stop on SIGTERM.
source "$(dirname "$0")/lib.sh"
golden="$DEEPINFER_TEST_DATA_DIR/golden"
log="${TMPDIR:-/tmp}/deepinfer_serve_test.$$"

expect_exit "no --model names the option" 2 "$DEEPINFER" serve
expect_eq "error names --model" "$("$DEEPINFER" serve 2>&1 | head -1 | grep -c -- 'pass --model DIR')" "1"
expect_exit "bad port" 2 "$DEEPINFER" serve --model "$golden/v41/tiny_fp8" --port many
expect_exit "not a model folder" 1 "$DEEPINFER" serve --model /nonexistent --port 0

"$DEEPINFER" serve --model "$golden/v41/tiny_fp8" --port 0 --cache-memory 64M >"$log" 2>"$log.err" &
pid=$!
port=""
for _ in $(seq 1 200); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log")
  [ -n "$port" ] && break
  sleep 0.05
done
expect_eq "startup line names the model" "$(grep -c 'model "tiny_fp8"' "$log")" "1"
expect_eq "health" "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" "200"
# The tiny fixture's 512-id vocabulary cannot hold the chat markers: a clean 400, not a crash.
expect_eq "chat with out-of-vocabulary markers is a 400" "$(curl -s -o /dev/null -w '%{http_code}' \
  -H 'Content-Type: application/json' -d '{"model":"tiny_fp8","messages":[{"role":"user","content":"hi"}]}' \
  "http://127.0.0.1:$port/v1/chat/completions")" "400"
body=$(curl -s -H 'Content-Type: application/json' -d '{"model":"tiny_fp8","prompt":[0,5,17],"max_tokens":3}' \
  "http://127.0.0.1:$port/v1/completions")
expect_eq "completion answers" "$(echo "$body" | grep -c '"object":"text_completion"')" "1"
expect_eq "request log line" "$(grep -c 'request id=cmpl-.* endpoint=/v1/completions status=200' "$log.err")" "1"
kill -TERM "$pid"
wait "$pid"
expect_eq "SIGTERM exits 0" "$?" "0"
rm -f "$log" "$log.err"
finish

#!/usr/bin/env bash
# `deepinfer serve` end to end: start on a free port, answer /health and a completion, stop on SIGTERM.
source "$(dirname "$0")/lib.sh"
golden="$DEEPINFER_TEST_DATA_DIR/golden"
log="${TMPDIR:-/tmp}/deepinfer_serve_test.$$"

expect_exit "bad port" 2 "$DEEPINFER" serve --model "$golden/v41/tiny_fp8" --port many
expect_exit "not a model folder" 1 "$DEEPINFER" serve --model /nonexistent --port 0
expect_exit "no compile slots" 2 "$DEEPINFER" serve --model "$golden/v41/tiny_fp8" --port 0 --grammar-compile-slots 0
expect_exit "too many compile slots" 2 "$DEEPINFER" serve --model "$golden/v41/tiny_fp8" --port 0 --grammar-compile-slots 5000

"$DEEPINFER" serve --model "$golden/v4/real_vocab" --served-model-name tiny --port 0 --cache-memory 64M >"$log" 2>"$log.err" &
pid=$!
port=$(listening_port "$log")
expect_eq "startup line names the model" "$(grep -c 'model "tiny" from .*real_vocab' "$log")" "1"
expect_eq "health" "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" "200"
chat=$(curl -s -H 'Content-Type: application/json' \
  -d '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4}' "http://127.0.0.1:$port/v1/chat/completions")
expect_eq "chat completion answers" "$(echo "$chat" | grep -c '"object":"chat.completion"')" "1"
body=$(curl -s -H 'Content-Type: application/json' -d '{"model":"tiny","prompt":[0,5,17],"max_tokens":3}' \
  "http://127.0.0.1:$port/v1/completions")
expect_eq "completion answers" "$(echo "$body" | grep -c '"object":"text_completion"')" "1"
expect_eq "request log line" "$(grep -c 'request id=cmpl-.* endpoint=/v1/completions status=200' "$log.err")" "1"
kill -TERM "$pid"
wait "$pid"
expect_eq "SIGTERM exits 0" "$?" "0"
rm -f "$log" "$log.err"
finish

#!/usr/bin/env bash
# Issue 19: `deepinfer serve` on SIGTERM drains with a deadline (--shutdown-timeout), then cancels
# what remains, and exits 0; a second SIGTERM or SIGINT exits 0 at once. Two endless streams keep
# the server busy in each case (no max_tokens: they would run to the end of the context).
source "$(dirname "$0")/lib.sh"
golden="$DEEPINFER_TEST_DATA_DIR/golden"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

start_server() {  # start_server NAME ARGS...: sets pid and port
  local name=$1
  shift
  "$DEEPINFER" serve --model "$golden/v4/real_vocab" --served-model-name tiny --port 0 --cache-memory 64M "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pid=$!
  port=$(listening_port "$tmp/$name.out")
}

start_streams() {  # two endless streams, running once the engine counts them
  for i in 1 2; do
    curl -sN -H 'Content-Type: application/json' --max-time 120 \
      -d '{"model":"tiny","prompt":[0,5,17],"stream":true,"ignore_eos":true}' \
      "http://127.0.0.1:$port/v1/completions" >"$tmp/stream$i.$1" 2>/dev/null &
  done
  for _ in $(seq 1 400); do
    running=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^deepinfer:num_requests_running{[^}]*} //p')
    [ "$running" = "2" ] && break
    sleep 0.05
  done
  expect_eq "$1: two streams running" "$running" "2"
}

# 1. The deadline: SIGTERM with --shutdown-timeout 1 ends in about 1 s, exit 0, streams cut.
start_server deadline --shutdown-timeout 1
start_streams deadline
began=$(date +%s%N)
kill -TERM "$pid"
sleep 0.3
expect_eq "deadline: new requests get 503 while draining" \
  "$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
     -d '{"model":"tiny","prompt":[0,5],"max_tokens":2}' "http://127.0.0.1:$port/v1/completions")" "503"
wait "$pid"
code=$?
took=$(( ($(date +%s%N) - began) / 1000000 ))
expect_eq "deadline: SIGTERM exits 0" "$code" "0"
expect_eq "deadline: stopped within 4 s of SIGTERM (took ${took} ms)" "$([ "$took" -lt 4000 ] && echo yes)" "yes"
expect_eq "deadline: the remaining requests were cancelled" \
  "$(grep -c 'cancelled 2 running request' "$tmp/deadline.err")" "1"
wait
expect_eq "deadline: each stream ended with [DONE]" "$(cat "$tmp"/stream*.deadline | grep -c '\[DONE\]')" "2"

# 2. A second signal: the default 30 s drain is cut short at once, exit 0.
for second in INT TERM; do
  start_server "second$second"
  start_streams "second$second"
  kill -TERM "$pid"
  sleep 0.5
  began=$(date +%s%N)
  kill "-$second" "$pid"
  wait "$pid"
  code=$?
  took=$(( ($(date +%s%N) - began) / 1000000 ))
  expect_eq "SIGTERM then SIG$second exits 0" "$code" "0"
  expect_eq "SIGTERM then SIG$second exits at once (took ${took} ms)" "$([ "$took" -lt 1000 ] && echo yes)" "yes"
  expect_eq "SIG$second: said so" "$(grep -c "second SIG$second, stopping now" "$tmp/second$second.err")" "1"
  wait
done
finish

#!/usr/bin/env bash
# Issue 16: `deepinfer serve --data-parallel 2` on the CPU. Greedy answers equal one engine's; a
# prompt goes where its prefix is cached while loads are balanced and to the least loaded rank
# otherwise (so two prompt families land on two ranks and their follow-ups hit the cache); a rank
# killed mid-stream ends that stream with an error event, the other rank serves meanwhile, and the
# killed one is restarted; a rank that cannot start fails the start with its own message; SIGTERM
# stops the front and every rank with exit 0.
source "$(dirname "$0")/lib.sh"
model="$DEEPINFER_TEST_DATA_DIR/golden/v4/real_vocab"
tmp=$(mktemp -d)
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT

start_server() {  # start_server NAME ARGS...: sets pid and port
  local name=$1
  shift
  "$DEEPINFER" serve --model "$model" --served-model-name tiny --port 0 --cache-memory 64M --threads 2 "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pid=$!
  pids+=("$pid")
  port=$(listening_port "$tmp/$name.out")
}

post() {  # post PORT PATH BODY
  curl -s --max-time 60 -H 'Content-Type: application/json' -d "$3" "http://127.0.0.1:$1$2"
}

ids() {  # ids FIRST COUNT: a JSON list of COUNT token ids from FIRST
  seq -s, "$1" "$(($1 + $2 - 1))"
}

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

metric() {  # metric PORT NAME ENGINE
  curl -s "http://127.0.0.1:$1/metrics" | sed -n "s/^$2{model_name=\"tiny\",engine=\"$3\"} //p"
}

wait_metric() {  # wait_metric PORT NAME ENGINE VALUE
  for _ in $(seq 1 400); do
    [ "$(metric "$1" "$2" "$3")" = "$4" ] && return
    sleep 0.05
  done
}

# 1. Usage.
expect_exit "--data-parallel 0 is a usage error" 2 "$DEEPINFER" serve --model "$model" --data-parallel 0

# 2. Greedy answers through two ranks equal one engine's.
start_server single
single_pid=$pid
single_port=$port
start_server front --data-parallel 2
front_pid=$pid
front_port=$port
expect_eq "the front says it serves two ranks" "$(grep -c 'data parallel over 2 engine ranks' "$tmp/front.out")" "1"
for body in '{"model":"tiny","prompt":[0,5,17,9],"max_tokens":8,"temperature":0}' \
            '{"model":"tiny","messages":[{"role":"user","content":"What is a monad?"}],"max_tokens":8,"temperature":0}'; do
  path=/v1/completions
  [[ $body == *messages* ]] && path=/v1/chat/completions
  expect_eq "greedy $path through the front equals one engine" \
    "$(post "$front_port" $path "$body" | json 'd["choices"][0]')" \
    "$(post "$single_port" $path "$body" | json 'd["choices"][0]')"
done
kill -TERM "$single_pid" 2>/dev/null

# 3. Placement: A holds one rank (a stream that does not end); B goes to the other, idle rank; the
# follow-ups of A and B go where their three blocks are cached, though B's rank is the less loaded.
a=$(ids 1000 200)
b=$(ids 3000 200)
curl -sN --max-time 120 -H 'Content-Type: application/json' \
  -d "{\"model\":\"tiny\",\"prompt\":[$a],\"stream\":true,\"ignore_eos\":true}" \
  "http://127.0.0.1:$front_port/v1/completions" >"$tmp/held.sse" 2>/dev/null &
held=$!
for _ in $(seq 1 400); do
  a_rank=
  for r in 0 1; do [ "$(metric "$front_port" deepinfer:data_parallel_requests_in_flight $r)" = "1" ] && a_rank=$r; done
  [ -n "$a_rank" ] && break
  sleep 0.05
done
expect_eq "A's stream is running on a rank" "$([ -n "$a_rank" ] && echo yes)" "yes"
b_rank=$((1 - a_rank))
before_a=$(metric "$front_port" deepinfer:data_parallel_requests_routed_total "$a_rank")
before_b=$(metric "$front_port" deepinfer:data_parallel_requests_routed_total "$b_rank")
post "$front_port" /v1/completions "{\"model\":\"tiny\",\"prompt\":[$b],\"max_tokens\":2}" >/dev/null
expect_eq "a new prompt goes to the idle rank" \
  "$(metric "$front_port" deepinfer:data_parallel_requests_routed_total "$b_rank")" "$((before_b + 1))"
cached_a=$(post "$front_port" /v1/completions "{\"model\":\"tiny\",\"prompt\":[$a,7,8,9],\"max_tokens\":2}" |
           json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')
cached_b=$(post "$front_port" /v1/completions "{\"model\":\"tiny\",\"prompt\":[$b,7,8,9],\"max_tokens\":2}" |
           json 'd["usage"]["prompt_tokens_details"]["cached_tokens"]')
expect_eq "A's follow-up went to A's rank (busier) and hit its cache" "$([ "$cached_a" -ge 192 ] && echo yes)" "yes"
expect_eq "B's follow-up went to B's rank and hit its cache" "$([ "$cached_b" -ge 192 ] && echo yes)" "yes"
expect_eq "A's rank took A's follow-up" \
  "$(metric "$front_port" deepinfer:data_parallel_requests_routed_total "$a_rank")" "$((before_a + 1))"

# 4. A's rank killed while it streams: that stream ends with an error event, the other rank
# serves, the killed one comes back.
victim=$(sed -n "s/.*engine rank $a_rank (pid \([0-9]*\)) listening.*/\1/p" "$tmp/front.err" | head -1)
kill -9 "$victim"
wait "$held"
expect_eq "the killed rank's stream ended with an error event" \
  "$(grep -c "engine rank $a_rank failed mid-answer" "$tmp/held.sse")" "1"
expect_eq "a request while that rank is down is served" \
  "$(post "$front_port" /v1/completions '{"model":"tiny","prompt":[0,5],"max_tokens":2}' | json 'd["usage"]["completion_tokens"]')" "2"
wait_metric "$front_port" deepinfer:data_parallel_engine_restarts_total "$a_rank" 1
wait_metric "$front_port" deepinfer:data_parallel_engine_up "$a_rank" 1
expect_eq "the killed rank was restarted" "$(curl -s "http://127.0.0.1:$front_port/health" | json "d['engines'][$a_rank]")" \
  "{'rank': $a_rank, 'up': True, 'restarts': 1}"
expect_eq "in-flight counts went back to zero" \
  "$(metric "$front_port" deepinfer:data_parallel_requests_in_flight 0)/$(metric "$front_port" deepinfer:data_parallel_requests_in_flight 1)" "0/0"

# 5. SIGTERM: the front and both ranks exit, 0.
ranks=$(sed -n 's/.*engine rank [01] (pid \([0-9]*\)) listening.*/\1/p' "$tmp/front.err" | tail -2)
kill -TERM "$front_pid"
wait "$front_pid"
expect_eq "SIGTERM stops the front with exit 0" "$?" "0"
alive=0
for rank in $ranks; do kill -0 "$rank" 2>/dev/null && alive=$((alive + 1)); done
expect_eq "no rank outlives the front" "$alive" "0"

# 6. A rank that cannot start fails the start, with its own message.
"$DEEPINFER" serve --model "$model" --port 0 --cache-memory 4K --data-parallel 2 --threads 2 \
  >"$tmp/bad.out" 2>"$tmp/bad.err"
expect_eq "a rank that cannot start: exit 1" "$?" "1"
expect_eq "the front names the rank that failed" \
  "$(grep -c 'engine rank [01] (pid [0-9]*) exited (exit status 1) before it listened' "$tmp/bad.err")" "1"
expect_eq "and shows its reason" "$([ "$(grep -c 'holds no block' "$tmp/bad.err")" -ge 1 ] && echo yes)" "yes"

finish

#!/usr/bin/env bash
# `deepinfer bench` end to end against `deepinfer serve` on a tiny real-vocabulary checkpoint.
source "$(dirname "$0")/lib.sh"
golden="$DEEPINFER_TEST_DATA_DIR/golden"
log="${TMPDIR:-/tmp}/deepinfer_bench_test.$$"
field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }

expect_exit "--help" 0 "$DEEPINFER" bench --help
expect_exit "unknown endpoint" 2 "$DEEPINFER" bench --endpoint embeddings
expect_exit "zero rate" 2 "$DEEPINFER" bench --request-rate 0
expect_exit "token ids need completions" 1 "$DEEPINFER" bench --endpoint chat --prompt-kind ids --model m
expect_exit "no server on the port" 1 "$DEEPINFER" bench --base-url http://127.0.0.1:9 --model m --num-prompts 1 --timeout 5
printf '{"prompt": "a"}\nnot json\n' >"$log.jsonl"
expect_eq "bad dataset line is named" \
  "$("$DEEPINFER" bench --dataset "$log.jsonl" --model m 2>&1 | grep -c "$log.jsonl:2: expected a JSON object")" "1"
rm -f "$log.jsonl"

if ! "$DEEPINFER" --help | grep -q '^  serve '; then
  echo "skip: this deepinfer has no 'serve' command, so there is no server to benchmark"
  finish
  exit
fi

"$DEEPINFER" serve --model "$golden/v4/real_vocab" --served-model-name tiny --port 0 --cache-memory 64M >"$log" 2>"$log.err" &
pid=$!
port=$(listening_port "$log")
url="http://127.0.0.1:$port"

# Four completions one after another whose 80-id prompts share their first 70 ids: each after the
# first finds the first 64-token cache block of the one before (64 x 3 = 192 hit tokens).
out=$("$DEEPINFER" bench --base-url "$url" --num-prompts 4 --input-len 80 --prefix-len 70 --output-len 4 \
  --max-concurrency 1 --json)
expect_eq "completions: model asked from /v1/models" "$(echo "$out" | field model)" '"tiny"'
expect_eq "completions: all succeed" "$(echo "$out" | field completed),$(echo "$out" | field failed)" "4,0"
expect_eq "completions: prompt tokens from usage" "$(echo "$out" | field total_input_tokens)" "320"
expect_eq "completions: prefix-cache hits" "$(echo "$out" | field cached_prompt_tokens)" "192"
expect_eq "completions: hit rate" "$(echo "$out" | field prefix_cache_hit_rate)" "0.6"
expect_eq "completions: TTFT measured" "$(echo "$out" | grep -c '"ttft_ms":{"count":4')" "1"

# Chat, three turns per conversation, two conversations at once at a Poisson rate. The first turns
# equal a one-turn run's prompts (same seed); turns 2 and 3 resend them with replies and new messages,
# so three turns hold more than three times the one-turn prompt tokens.
chat() { "$DEEPINFER" bench --base-url "$url" --endpoint chat --model tiny --num-prompts 2 --input-len 40 \
  --output-len 3 --request-rate 20 --seed 3 --json "$@"; }
one=$(chat --multi-turn 1)
out=$(chat --multi-turn 3)
expect_eq "multi-turn chat: every turn succeeds" "$(echo "$out" | field completed),$(echo "$out" | field failed)" "6,0"
first=$(echo "$one" | field total_input_tokens)
all=$(echo "$out" | field total_input_tokens)
expect_eq "multi-turn chat: later turns resend the history ($all vs 3 x $first)" \
  "$([ "${all:-0}" -gt $((3 * ${first:-0})) ] && [ "${first:-0}" -gt 0 ] && echo yes)" "yes"

table=$("$DEEPINFER" bench --base-url "$url" --model tiny --num-prompts 2 --input-len 8 --output-len 2 2>/dev/null)
expect_eq "table lists the metrics" "$(echo "$table" | grep -cE '^(Mean TTFT|P99 TPOT|P90 ITL|Prefix-cache hit rate|Output token throughput)')" "5"
expect_exit "unknown model fails every request" 1 "$DEEPINFER" bench --base-url "$url" --model nope --num-prompts 1

# --response-format goes into every request: a schema the server enforces succeeds, one it refuses
# (uniqueItems) fails every request, so the field was sent.
echo '{"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}' > "$log.format.json"
out=$("$DEEPINFER" bench --base-url "$url" --model tiny --num-prompts 2 --input-len 8 --output-len 4 --json \
  --response-format "$log.format.json")
expect_eq "response format: all succeed" "$(echo "$out" | field completed),$(echo "$out" | field failed)" "2,0"
echo '{"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": true}}}' \
  > "$log.refused.json"
expect_exit "an unenforceable response format fails every request" 1 "$DEEPINFER" bench --base-url "$url" \
  --model tiny --num-prompts 1 --response-format "$log.refused.json"
expect_exit "a missing response format file" 1 "$DEEPINFER" bench --base-url "$url" --model tiny \
  --response-format "$log.missing.json"

kill -TERM "$pid"
wait "$pid"
rm -f "$log" "$log.err" "$log.format.json" "$log.refused.json"
finish

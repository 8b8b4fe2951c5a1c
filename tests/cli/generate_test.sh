#!/usr/bin/env bash
# `deepinfer generate` end to end on the golden checkpoints.
source "$(dirname "$0")/lib.sh"
golden="$DEEPINFER_TEST_DATA_DIR/golden"
ids_of() { sed -n 's/.*"ids":\(\[[^]]*\]\).*/\1/p'; }
count_ids() { ids_of | awk -F, '{ print NF }'; }

# The reference's greedy continuation of its 16-token prompt (tests/data/golden/v4/README.md).
prompt='[379,363,360,330,43,312,412,80,505,462,409,49,240,75,410,237]'
expect_eq "greedy continuation equals the reference's" \
  "$("$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --ids "$prompt" --max-tokens 16 --json | ids_of)" \
  "[25,457,39,328,19,10,166,244,195,35,280,102,70,26,61,39]"
expect_eq "FP8/FP4 checkpoint runs" \
  "$("$DEEPINFER" generate --model "$golden/v4/tiny_fp8" --ids "$prompt" --max-tokens 4 --json | grep -c '"finish_reason":"length"')" "1"

seeded() { "$DEEPINFER" generate --model "$golden/v41/tiny_fp8" --tokenizer "$DEEPINFER_ASSET_DIR/tokenizer/deepseek_v41_tokenizer.json" \
  --ids '[5,17,42,99,3,250]' --max-tokens 12 --temperature 0.9 --top-p 0.95 --seed "$1" --json | ids_of; }
first=$(seeded 1234)
expect_eq "a seed repeats exactly" "$(seeded 1234)" "$first"
if [ "$(seeded 1235)" = "$first" ]; then expect_eq "another seed differs" "same" "different"; fi

# --prompt-ids is --ids as comma-separated ids.
expect_eq "--prompt-ids gives what --ids gives" \
  "$("$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --prompt-ids "$(printf '%s' "$prompt" | tr -d '[]')" --max-tokens 16 --json | ids_of)" \
  "[25,457,39,328,19,10,166,244,195,35,280,102,70,26,61,39]"
expect_eq "--prompt-ids allows spaces around the ids" \
  "$("$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --prompt-ids ' 5, 17 ,42' --max-tokens 4 --json | ids_of)" \
  "$("$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --ids '[5,17,42]' --max-tokens 4 --json | ids_of)"
expect_exit "--prompt-ids: not an id" 1 "$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --prompt-ids 1,x,3
expect_exit "--prompt-ids: an empty item" 1 "$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --prompt-ids 1,,3
expect_exit "--prompt-ids: outside the vocabulary" 1 "$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --prompt-ids 5,600
expect_exit "both --ids and --prompt-ids" 2 "$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --ids '[5]' --prompt-ids 5

# --ignore-eos: the embedded model answers a chat prompt and stops at its end-of-sentence id
# within 100 tokens; with --ignore-eos it runs on to --max-tokens.
embedded="$DEEPINFER_ASSET_DIR/models/deepinfer-mini-v41"
if [ -f "$embedded/config.json" ]; then
  chat_ids=$(printf '%s\n' '{"messages":[{"role":"user","content":"What is 47 + 38?"}]}' | "$DEEPINFER" render |
    sed -n 's/.*"ids":\(\[[^]]*\]\).*/\1/p')
  stops=$("$DEEPINFER" generate --ids "$chat_ids" --max-tokens 100 --json)
  expect_eq "without --ignore-eos it stops at EOS" "$(printf '%s' "$stops" | grep -c '"finish_reason":"stop"')" "1"
  runs=$("$DEEPINFER" generate --ids "$chat_ids" --max-tokens 100 --json --ignore-eos)
  expect_eq "--ignore-eos runs to --max-tokens" \
    "$(printf '%s' "$runs" | grep -c '"finish_reason":"length"') $(printf '%s' "$runs" | count_ids)" "1 100"
  expect_eq "--ignore-eos: the same tokens up to and including the EOS" \
    "$(printf '%s' "$runs" | ids_of | cut -d, -f1-"$(printf '%s' "$stops" | count_ids)")]" \
    "$(printf '%s' "$stops" | ids_of)"
else
  echo "skip --ignore-eos checks: the embedded model is not in this checkout"
fi

expect_exit "text prompt needs a tokenizer" 1 "$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --prompt hi
expect_exit "prompt id outside the vocabulary" 1 "$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --ids '[600]'
expect_exit "bad sampling parameter" 1 "$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --ids '[5]' --top-p 1.5
expect_exit "not a model folder" 1 "$DEEPINFER" generate --model /nonexistent --ids '[5]'
expect_exit "both --prompt and --ids" 2 "$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --ids '[5]' --prompt x
expect_exit "non-numeric --max-tokens" 2 "$DEEPINFER" generate --model "$golden/v4/tiny_bf16" --ids '[5]' --max-tokens many
expect_exit "--help" 0 "$DEEPINFER" generate --help
finish

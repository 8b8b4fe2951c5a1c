#!/usr/bin/env bash
# `deepinfer render`: the served prompt for Chat Completions bodies, and --train rendering.
source "$(dirname "$0")/lib.sh"
ids_of() { sed -n 's/.*"ids":\[\([^]]*\)\].*/\1/p'; }
field() { sed -n "s/.*\"$1\":\\([0-9]*\\).*/\\1/p"; }

ask='{"messages":[{"role":"user","content":"What is 2 + 3?"}]}'
answer='{"messages":[{"role":"user","content":"What is 2 + 3?"},{"role":"assistant","reasoning_content":"2 + 3 = 5.","content":"5"}]}'
plain=$(printf '%s\n' "$ask" | "$DEEPINFER" render)
expect_eq "prompt ends with the thinking opener" "$(printf '%s' "$plain" | grep -c '<｜Assistant｜><think>","ids"')" "1"
expect_eq "prompt ids: BOS, effort prefix ... Assistant, <think>" \
  "$(printf '%s' "$plain" | ids_of | sed 's/,.*,/ ... /')" "0 ... 128821"
expect_eq "output_start" "$(printf '%s' "$plain" | sed -n 's/.*"output_start":"\([a-z_]*\)".*/\1/p')" "thinking"
# The same ids as the tokenizer gives the rendered text (no client text spells a marker here).
text=$(printf '%s' "$plain" | sed -n 's/^{"text":\("[^"]*"\).*/\1/p')
expect_eq "ids equal tokenize of the text" "[$(printf '%s' "$plain" | ids_of)]" \
  "$(printf '%s\n' "$text" | "$DEEPINFER" tokenize --jsonl)"

trained=$(printf '%s\n' "$answer" | "$DEEPINFER" render --train)
start=$(printf '%s' "$trained" | field answer_start)
prompt_ids=$(printf '%s' "$plain" | ids_of)
expect_eq "answer_start is the prompt's length" "$start" "$(printf '%s' "$prompt_ids" | awk -F, '{print NF}')"
full_ids=$(printf '%s' "$trained" | ids_of)
expect_eq "the prompt is a prefix of the training ids" "${full_ids:0:${#prompt_ids}}" "$prompt_ids"
tail_ids="[${full_ids:$((${#prompt_ids} + 1))}]"
expect_eq "the target is reasoning, </think>, answer, EOS" \
  "$(printf '%s' "$tail_ids" | "$DEEPINFER" tokenize --decode)" "2 + 3 = 5.</think>5<｜end▁of▁sentence｜>"
off=$(printf '%s\n' "${answer%\}}"',"thinking":{"type":"disabled"}}' | "$DEEPINFER" render --train)
expect_eq "thinking off: the target drops the reasoning" \
  "$(printf '%s' "$off" | grep -c '<｜Assistant｜></think>5<｜end▁of▁sentence｜>"')" "1"
expect_eq "one output line per input line" "$(printf '%s\n%s\n' "$ask" "$ask" | "$DEEPINFER" render | wc -l)" "2"

tools='"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}]'
required='{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],'"$tools"',"tool_choice":"required"}'
calling='{"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]}],'"$tools"'}'
expect_eq "--train: a tool-calling answer ends with the calls block and EOS" \
  "$(printf '%s\n' "$calling" | "$DEEPINFER" render --train | grep -c '</think>\\n\\n<｜DSML｜ calls>\\n<｜DSML｜ invoke name=\\"f\\">\\n<｜DSML｜ parameter name=\\"a\\" string=\\"false\\">1</｜DSML｜ parameter>\\n</｜DSML｜ invoke>\\n</｜DSML｜ calls><｜end▁of▁sentence｜>"')" "1"
expect_exit "--train refuses a prompt the answer does not continue (required tool_choice)" 1 \
  "$DEEPINFER" render --train <<<"$required"
expect_exit "--train needs an assistant answer last" 1 "$DEEPINFER" render --train <<<"$ask"
expect_exit "a request the server refuses" 1 "$DEEPINFER" render <<<'{"messages":[]}'
expect_exit "not JSON" 1 "$DEEPINFER" render <<<'nope'
expect_exit "missing --input file" 1 "$DEEPINFER" render --input /nonexistent.jsonl
expect_exit "bad --format" 2 "$DEEPINFER" render --format v5
expect_exit "--help" 0 "$DEEPINFER" render --help
finish

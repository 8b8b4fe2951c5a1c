#!/usr/bin/env bash
# `deepinfer perplexity` on the real-vocabulary golden checkpoint (V4, 129280 ids, hidden 16).
source "$(dirname "$0")/lib.sh"
model="$DEEPINFER_TEST_DATA_DIR/golden/v4/real_vocab"
tokenizer="$DEEPINFER_ASSET_DIR/tokenizer/deepseek_v41_tokenizer.json"
dir=$(mktemp -d "${TMPDIR:-/tmp}/deepinfer_perplexity_test.XXXXXX")
trap 'rm -rf "$dir"' EXIT
ppl() { "$DEEPINFER" perplexity --model "$model" --tokenizer "$tokenizer" --threads 2 "$@"; }
num() { sed -n "s/.*\"$1\":\\([-0-9.e+]*\\).*/\\1/p"; }
# close A B TOLERANCE: "yes" when |A - B| <= TOLERANCE
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; print (a != "" && d <= t) ? "yes" : "no " a " vs " b }'; }

# The golden's sentence: ids 0 (BOS) + 21 tokens. The reference stores, per position, the
# log-sum-exp of its logits and the logit of the next input id: their difference, averaged over
# the 21 positions that predict a token, is 13.812728231684 (reference/golden.safetensors).
sentence="The quick brown fox jumps over the lazy dog, then it runs back into the quiet forest to sleep."
printf '"%s"\n' "$sentence" >"$dir/text.jsonl"
expect_eq "the sentence tokenizes to the golden's ids" \
  "$(printf '"%s"\n' "$sentence" | "$DEEPINFER" tokenize --jsonl --add-bos --tokenizer "$tokenizer")" \
  "[0,671,4787,13769,46012,54994,1060,270,41638,6397,14,1539,436,12122,1559,1055,270,12426,9364,304,7053,16]"
text=$(ppl --file "$dir/text.jsonl" --json)
expect_eq "JSON fields, in order" "$(printf '%s' "$text" | sed 's/"[^"]*"://g; s/[^,{}]//g')" "{,,,,,,}"
expect_eq "file, examples, tokens" "$(printf '%s' "$text" | sed 's/,"mean_nll.*//')" \
  "{\"file\":\"$dir/text.jsonl\",\"examples\":1,\"tokens\":21"
expect_eq "mean NLL equals the reference's (logits within 1e-4, so NLLs within 2e-4)" \
  "$(close "$(printf '%s' "$text" | num mean_nll)" 13.812728231684 0.0002)" "yes"
expect_eq "perplexity is exp(mean NLL)" \
  "$(close "$(printf '%s' "$text" | num perplexity)" "$(awk -v m="$(printf '%s' "$text" | num mean_nll)" 'BEGIN { printf "%.6f", exp(m) }')" 0.01)" "yes"
expect_eq "--ctx truncates each example from its start" "$(ppl --file "$dir/text.jsonl" --ctx 6 --json | num tokens)" "5"

# A chat example scores only the answer: reasoning, </think>, content, end-of-sentence.
chat='{"messages":[{"role":"user","content":"What is 2 + 3?"},{"role":"assistant","reasoning_content":"2 + 3 = 5.","content":"5"}]}'
printf '%s\n' "$chat" >"$dir/chat.jsonl"
answer_ids=$(printf '%s\n' "$chat" | "$DEEPINFER" render --train --format v4 --tokenizer "$tokenizer" |
  sed -n 's/.*"ids":\[\([^]]*\)\].*"answer_start":\([0-9]*\).*/\1 \2/p' | awk '{ print split($1, ids, ",") - $2 }')
chat_json=$(ppl --file "$dir/chat.jsonl" --json)
expect_eq "a chat example's targets are its answer ids (render --train)" "$(printf '%s' "$chat_json" | num tokens)" "$answer_ids"

# Two files together: the mean is the target-weighted mean of each file's (one total, one count).
cat "$dir/text.jsonl" "$dir/chat.jsonl" "$dir/text.jsonl" >"$dir/mixed.jsonl"
mixed=$(ppl --file "$dir/mixed.jsonl" --json)
weighted=$(awk -v a="$(printf '%s' "$text" | num mean_nll)" -v na="$(printf '%s' "$text" | num tokens)" \
  -v b="$(printf '%s' "$chat_json" | num mean_nll)" -v nb="$(printf '%s' "$chat_json" | num tokens)" \
  'BEGIN { printf "%.12f", (2 * a * na + b * nb) / (2 * na + nb) }')
expect_eq "mixed file: target-weighted mean of its parts" "$(close "$(printf '%s' "$mixed" | num mean_nll)" "$weighted" 1e-9)" "yes"
expect_eq "mixed file: counts add up" "$(printf '%s' "$mixed" | num tokens)" "$((2 * $(printf '%s' "$text" | num tokens) + answer_ids))"
# Batching runs the examples together through forward_batch: the same numbers to the last bit.
expect_eq "batch 1 and batch 3 give the same mean NLL, bit for bit" \
  "$(ppl --file "$dir/mixed.jsonl" --batch 1 --json | num mean_nll)" "$(printf '%s' "$mixed" | num mean_nll)"
expect_eq "stdin (--file -) and the human summary" \
  "$(ppl --file - <"$dir/mixed.jsonl" | sed 's/mean NLL [0-9.]*, perplexity [0-9.]*$/.../')" \
  "stdin: 3 examples, $(printf '%s' "$mixed" | num tokens) target tokens, ..."

# --ids-file: the sentence's ids as one JSON array; the per-token NLLs (one per id after the
# first), their mean (the text example's, as the same ids are scored) and its exp.
golden_ids="[0,671,4787,13769,46012,54994,1060,270,41638,6397,14,1539,436,12122,1559,1055,270,12426,9364,304,7053,16]"
printf '%s\n' "$golden_ids" >"$dir/ids.json"
ids_json=$(ppl --ids-file "$dir/ids.json" --json)
nll_list() { sed -n 's/.*"nll":\[\([^]]*\)\].*/\1/p'; }
expect_eq "--ids-file JSON fields, in order" "$(printf '%s' "$ids_json" | sed 's/\[[^]]*\]//g; s/"\([a-z_]*\)":[^,}]*/\1/g')" \
  "{file,examples,tokens,nll,mean_nll,perplexity,ppl,seconds}"
expect_eq "--ids-file: ppl is perplexity under llama.cpp's name" \
  "$(printf '%s' "$ids_json" | sed -n 's/.*"perplexity":\([^,]*\),.*/\1/p')" \
  "$(printf '%s' "$ids_json" | sed -n 's/.*"ppl":\([^,]*\),.*/\1/p')"
expect_eq "--ids-file: one NLL per id after the first" \
  "$(printf '%s' "$ids_json" | nll_list | awk -F, '{ print NF }') $(printf '%s' "$ids_json" | num tokens)" "21 21"
expect_eq "--ids-file: mean_nll is the mean of the NLLs" \
  "$(close "$(printf '%s' "$ids_json" | nll_list | awk -F, '{ for (i = 1; i <= NF; i++) s += $i; printf "%.12f", s / NF }')" \
    "$(printf '%s' "$ids_json" | num mean_nll)" 1e-9)" "yes"
expect_eq "--ids-file: perplexity is exp(mean_nll)" \
  "$(close "$(printf '%s' "$ids_json" | num perplexity)" "$(awk -v m="$(printf '%s' "$ids_json" | num mean_nll)" 'BEGIN { printf "%.6f", exp(m) }')" 0.01)" "yes"
expect_eq "--ids-file scores what the text example scores, bit for bit" \
  "$(printf '%s' "$ids_json" | num mean_nll)" "$(printf '%s' "$text" | num mean_nll)"
# No tokenizer needed: a model folder without one (tiny_bf16, vocabulary 512).
tiny="$DEEPINFER_TEST_DATA_DIR/golden/v4/tiny_bf16"
expect_eq "--ids-file from stdin, no tokenizer: one line per target, then the summary" \
  "$(printf '[5,17,42,99]' | "$DEEPINFER" perplexity --model "$tiny" --ids-file - | awk 'NR <= 3 { printf "%s %s|", $1, $2 } NR == 4 { sub(/mean NLL.*/, ""); print }')" \
  "1 17|2 42|3 99|stdin: 1 examples, 3 target tokens, "
expect_eq "--ids-file: --ctx truncates" "$(ppl --ids-file "$dir/ids.json" --ctx 6 --json | num tokens)" "5"
printf '[5]' >"$dir/one_id.json"
expect_exit "--ids-file: one id has no target" 1 "$DEEPINFER" perplexity --model "$tiny" --ids-file "$dir/one_id.json"
printf '[5,600]' >"$dir/outside.json"
expect_exit "--ids-file: an id outside the vocabulary" 1 "$DEEPINFER" perplexity --model "$tiny" --ids-file "$dir/outside.json"
printf '{"ids":[5,6]}' >"$dir/object.json"
expect_exit "--ids-file: not an array" 1 "$DEEPINFER" perplexity --model "$tiny" --ids-file "$dir/object.json"
expect_exit "--ids-file: missing file" 1 "$DEEPINFER" perplexity --model "$tiny" --ids-file "$dir/nonexistent.json"
expect_exit "--file and --ids-file together" 2 ppl --file "$dir/text.jsonl" --ids-file "$dir/ids.json"

printf '"a"\n{"messages": [\n' >"$dir/bad.jsonl"
expect_exit "a line that is not JSON" 1 ppl --file "$dir/bad.jsonl"
expect_eq "the error names the line" "$(ppl --file "$dir/bad.jsonl" 2>&1 | grep -c "bad.jsonl line 2: not valid JSON")" "1"
printf '{"messages":[{"role":"user","content":"hi"}]}\n' >"$dir/noanswer.jsonl"
expect_eq "a body without an answer is refused, line named" \
  "$(ppl --file "$dir/noanswer.jsonl" 2>&1 | grep -c "noanswer.jsonl line 1: the last message must be the assistant answer")" "1"
expect_exit "an answer beyond --ctx has no target" 1 ppl --file "$dir/chat.jsonl" --ctx 4
printf '""\n' >"$dir/empty_text.jsonl"
expect_exit "empty text has no target" 1 ppl --file "$dir/empty_text.jsonl"
expect_exit "a number is not an example" 1 ppl --file - <<<'42'
: >"$dir/empty.jsonl"
expect_exit "empty file" 1 ppl --file "$dir/empty.jsonl"
expect_exit "missing file" 1 ppl --file "$dir/nonexistent.jsonl"
expect_exit "not a model folder" 1 "$DEEPINFER" perplexity --model /nonexistent --tokenizer "$tokenizer" --file "$dir/text.jsonl"
expect_exit "missing --file" 2 ppl
expect_exit "bad --ctx" 2 ppl --file "$dir/text.jsonl" --ctx 1
expect_exit "bad --batch" 2 ppl --file "$dir/text.jsonl" --batch none
expect_exit "--help" 0 "$DEEPINFER" perplexity --help
finish

#!/usr/bin/env bash
# `--device cpu|cuda[:N]` on generate, perplexity and serve: cpu runs and gives the CPU's numbers;
# a malformed value is a usage error (2); cuda where no GPU answers (or the build has no CUDA
# backend) is a failure (1) that says so. Where a GPU does answer, cuda must give greedy
# generate's ids exactly.
source "$(dirname "$0")/lib.sh"
golden="$DEEPINFER_TEST_DATA_DIR/golden"
model="$golden/v4/tiny_bf16"
ids_of() { sed -n 's/.*"ids":\(\[[^]]*\]\).*/\1/p'; }
log="${TMPDIR:-/tmp}/deepinfer_device_test.$$"
trap 'rm -f "$log" "$log.err"' EXIT
gen() { "$DEEPINFER" generate --model "$model" --prompt-ids 379,363,360,330,43,312,412,80 --max-tokens 8 --json "$@"; }

reference=$(gen 2>/dev/null | ids_of)
expect_eq "generate --device cpu gives the default's ids" "$(gen --device cpu 2>/dev/null | ids_of)" "$reference"
expect_eq "generate prints the device line on stderr" "$(gen --device cpu 2>&1 >/dev/null | grep -ci '^deepinfer generate: .*cpu')" "1"
printf '[5,17,42,99,3]' >"$log"
expect_eq "perplexity --device cpu gives the default's figures" \
  "$("$DEEPINFER" perplexity --model "$model" --ids-file "$log" --device cpu --json 2>/dev/null | sed 's/,"seconds.*//')" \
  "$("$DEEPINFER" perplexity --model "$model" --ids-file "$log" --json 2>/dev/null | sed 's/,"seconds.*//')"

# run COMMAND ARGS...: the command on the tiny model with a valid command line besides ARGS.
run() {
  local command=$1
  shift
  case $command in
    generate) "$DEEPINFER" generate --model "$model" --prompt-ids 5,17 --max-tokens 2 "$@" ;;
    perplexity) "$DEEPINFER" perplexity --model "$model" --ids-file "$log" "$@" ;;
    serve) "$DEEPINFER" serve --model "$model" --port 0 "$@" ;;
  esac
}
for command in generate perplexity serve; do
  expect_exit "$command --device gpu is a usage error" 2 run "$command" --device gpu
  expect_exit "$command --device cuda:x is a usage error" 2 run "$command" --device cuda:x
done

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  # A GPU answers (it may still be a build without the CUDA backend: then cuda is refused).
  if cuda=$(gen --device cuda 2>"$log.err"); then
    expect_eq "generate --device cuda gives the CPU's greedy ids" "$(printf '%s' "$cuda" | ids_of)" "$reference"
  else
    expect_eq "generate --device cuda refused: this build has no CUDA backend" \
      "$(grep -ci 'cuda' "$log.err" | sed 's/^[1-9][0-9]*$/named/')" "named"
  fi
else
  for command in generate perplexity serve; do
    expect_exit "$command --device cuda without a GPU fails" 1 run "$command" --device cuda
    expect_eq "$command: the error says why (names cuda)" \
      "$(run "$command" --device cuda 2>&1 >/dev/null | grep -ci 'cuda' | sed 's/^[1-9][0-9]*$/named/')" "named"
  done
  expect_exit "cuda:3 without a GPU fails" 1 run generate --device cuda:3
fi

# serve --device cpu: the device line on stderr at startup, then it serves.
"$DEEPINFER" serve --model "$golden/v4/real_vocab" --served-model-name tiny --device cpu --port 0 --cache-memory 64M >"$log" 2>"$log.err" &
pid=$!
port=$(listening_port "$log")
expect_eq "serve --device cpu starts" "$([ -n "$port" ] && echo listening)" "listening"
expect_eq "serve prints the device line on stderr" "$(grep -ci '^deepinfer serve: .*cpu' "$log.err")" "1"
expect_eq "and answers" "$(curl -s -H 'Content-Type: application/json' -d '{"model":"tiny","prompt":[0,5,17],"max_tokens":3}' \
  "http://127.0.0.1:$port/v1/completions" | grep -c '"object":"text_completion"')" "1"
kill -TERM "$pid"
wait "$pid"
expect_eq "SIGTERM exits 0" "$?" "0"
finish

#!/usr/bin/env bash
# `deepinfer tokenize` end to end, with ids from the DeepSeek V4.1 conformance vectors.
source "$(dirname "$0")/lib.sh"

expect_eq "encode stdin" "$(printf 'Hello, world!' | "$DEEPINFER" tokenize)" "[19923,14,2058,3]"
expect_eq "encode --text" "$("$DEEPINFER" tokenize --text '你好，世界')" "[30594,303,3427]"
expect_eq "special tokens in text" "$("$DEEPINFER" tokenize --text '<｜User｜>Hi<｜Assistant｜>')" "[128803,23166,128804]"
expect_eq "--add-bos" "$("$DEEPINFER" tokenize --add-bos --text 'Hello')" "[0,19923]"
expect_eq "--jsonl" "$(printf '"Hello"\n"a  b"\n' | "$DEEPINFER" tokenize --jsonl)" $'[19923]\n[67,223,291]'
expect_eq "--decode" "$(printf '[19923,14,2058,3]' | "$DEEPINFER" tokenize --decode)" "Hello, world!"
expect_eq "--decode --jsonl" "$(printf '[30594,303,3427]\n[0,19923]\n' | "$DEEPINFER" tokenize --decode --jsonl)" \
  $'"你好，世界"\n"<｜begin▁of▁sentence｜>Hello"'
expect_eq "--decode --skip-special" "$(printf '[0,19923]' | "$DEEPINFER" tokenize --decode --skip-special)" "Hello"
model_dir=$(mktemp -d)
trap 'rm -rf "$model_dir"' EXIT
ln -s "$DEEPINFER_ASSET_DIR/tokenizer/deepseek_v41_tokenizer.json" "$model_dir/tokenizer.json"
expect_eq "tokenizer from a model folder" "$("$DEEPINFER" tokenize --tokenizer "$model_dir" --text Hello)" "[19923]"

expect_exit "--help" 0 "$DEEPINFER" tokenize --help
expect_exit "unknown option" 2 "$DEEPINFER" tokenize --bogus
expect_exit "--skip-special without --decode" 2 "$DEEPINFER" tokenize --skip-special --text x
expect_exit "missing tokenizer file" 1 "$DEEPINFER" tokenize --tokenizer /nonexistent/tokenizer.json --text x
expect_exit "jsonl line that is not a string" 1 "$DEEPINFER" tokenize --jsonl <<<'[1,2]'
expect_exit "decode of a non-array" 1 "$DEEPINFER" tokenize --decode --text '"x"'
expect_exit "decode of an id past the vocabulary" 1 "$DEEPINFER" tokenize --decode --text '[99999999]'
expect_exit "no command" 2 "$DEEPINFER"
expect_exit "unknown command" 2 "$DEEPINFER" frobnicate
expect_exit "top-level --help" 0 "$DEEPINFER" --help
finish

#!/usr/bin/env bash
# `deepinfer inspect` end to end on the golden checkpoints and on broken folders.
source "$(dirname "$0")/lib.sh"
golden="$DEEPINFER_TEST_DATA_DIR/golden/v4"

expect_eq "complete BF16 checkpoint" "$("$DEEPINFER" inspect "$golden/tiny_bf16" | tail -n 1)" "complete"
expect_eq "FP8/FP4 release format" "$("$DEEPINFER" inspect "$golden/tiny_fp8" | grep -c 'quantization: FP8 e4m3, 128x128 blocks')" "1"
expect_eq "--json" "$("$DEEPINFER" inspect "$golden/tiny_fp8" --json | grep -c '"complete": true')" "1"
expect_eq "--tensors lists canonical names" \
  "$("$DEEPINFER" inspect "$golden/tiny_bf16" --tensors | grep -c 'model.layers.0.attn.norm.weight -> layers.0.attn.kv_norm.weight')" "1"

expect_eq "V4.1 is told from V4 by its config" \
  "$("$DEEPINFER" inspect "$DEEPINFER_TEST_DATA_DIR/golden/v41/tiny_fp8" | sed -n 2p)" "V4.1 family, custom size (deepseek_v41)"
expect_eq "V4.1 layer roles" \
  "$("$DEEPINFER" inspect "$DEEPINFER_TEST_DATA_DIR/golden/v41/tiny_fp8" | grep -c 'CSA2 full, 3 CSA2 reuse, 1 CSA2 reindex); 2 Engram')" "1"
expect_eq "V4.1 FP8 32x32" \
  "$("$DEEPINFER" inspect "$DEEPINFER_TEST_DATA_DIR/golden/v41/tiny_fp8" | grep -c 'FP8 e4m3, 32x32 blocks')" "1"

broken=$(mktemp -d)
trap 'rm -rf "$broken"' EXIT
cp "$golden/tiny_fp8/config.json" "$golden/tiny_fp8/model.safetensors.index.json" "$broken/"
cp "$golden/tiny_fp8/"model-0000*.safetensors "$broken/"
rm "$broken/$(ls "$golden/tiny_fp8" | grep -m1 '^model-0000.*safetensors$')"
expect_exit "a shard is missing" 1 "$DEEPINFER" inspect "$broken"
expect_eq "the missing shard is named" \
  "$("$DEEPINFER" inspect "$broken" 2>&1 >/dev/null | grep -c 'model-0000')" "1"

expect_exit "complete checkpoint exits 0" 0 "$DEEPINFER" inspect "$golden/tiny_bf16"
expect_exit "no such folder" 1 "$DEEPINFER" inspect /nonexistent/model
expect_exit "two folders given" 2 "$DEEPINFER" inspect "$golden/tiny_bf16" "$golden/tiny_fp8"
expect_exit "--help" 0 "$DEEPINFER" inspect --help
finish

#!/usr/bin/env bash
# The embedded model's card states figures with the commands that reproduce them; this runs the
# `deepinfer perplexity` ones and compares with what MODEL_CARD.md says (same token counts, mean
# NLL within 1e-4: the card rounds to 5 decimals, and the figures are deterministic on AVX2). A
# change to the model, the eval files or the numerics that moves them makes the card stale: then
# rerun the commands and update the card. (The held-out arithmetic figure is the SDK test's.)
source "$(dirname "$0")/lib.sh"
model="$DEEPINFER_ASSET_DIR/models/deepinfer-mini-v41"
if [ ! -f "$model/config.json" ]; then
  echo "SKIP: $model/config.json is absent (the embedded model is not in this checkout)"
  exit 77
fi

# "| <label> ... | 0.03591 (1.0366), 28,837 tokens | `build/deepinfer perplexity --file .../eval/<split>.jsonl` |"
card_row() { grep -E "^\| .*\| [0-9.]+ \([0-9.]+\), [0-9,]+ tokens \| .*eval/$1\.jsonl" "$model/MODEL_CARD.md"; }

for split in chat_test code_test; do
  row=$(card_row "$split")
  expect_eq "MODEL_CARD.md has a perplexity row for $split" "$(printf '%s\n' "$row" | grep -c .)" "1"
  card_nll=$(printf '%s' "$row" | sed -E 's/.*\| ([0-9.]+) \([0-9.]+\), ([0-9,]+) tokens \|.*/\1/')
  card_tokens=$(printf '%s' "$row" | sed -E 's/.*\| ([0-9.]+) \([0-9.]+\), ([0-9,]+) tokens \|.*/\2/' | tr -d ,)
  json=$("$DEEPINFER" perplexity --file "$model/eval/$split.jsonl" --json)
  tokens=$(printf '%s' "$json" | sed -E 's/.*"tokens":([0-9]+).*/\1/')
  nll=$(printf '%s' "$json" | sed -E 's/.*"mean_nll":([0-9.eE+-]+).*/\1/')
  expect_eq "$split: scored tokens as the card says" "$tokens" "$card_tokens"
  expect_eq "$split: mean NLL $nll within 1e-4 of the card's $card_nll" \
    "$(awk -v a="$nll" -v b="$card_nll" 'BEGIN { d = a - b; if (d < 0) d = -d; print (d <= 1e-4) ? "yes" : "no" }')" "yes"
done
finish

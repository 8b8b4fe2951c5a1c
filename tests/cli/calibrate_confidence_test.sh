#!/usr/bin/env bash
# `deepinfer calibrate-confidence` end to end: a log's fit printed and written into a model's
# config.json (its other keys and their order kept), and the refusals' exit codes.
source "$(dirname "$0")/lib.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 3,000 rounds of a 3-draft head whose true survival is sigmoid(raw / 2): too sharp as it stands,
# so the fit's temperatures are above 1 (node's deterministic generator: a fixed LCG).
node -e '
let x = 12345;
const u = () => (x = (x * 1103515245 + 12345) % 2147483648) / 2147483648;
const lines = [];
for (let n = 0; n < 3000; n++) {
  const raw = [], keep = [];
  let alive = true, accepted = 0;
  for (let k = 0; k < 3; k++) {
    const r = 6 * u() - 2;
    raw.push(r);
    if (alive && u() < 1 / (1 + Math.exp(-r / 2))) accepted++; else alive = false;
  }
  lines.push(JSON.stringify({raw, accepted}));
}
console.log(lines.join("\n"));' >"$work/log.jsonl"

printf '{\n  "model_type": "deepseek_v41",\n  "dspark_block_size": 3,\n  "vocab_size": 7\n}\n' >"$work/config.json"
expect_exit "a fit" 0 "$DEEPINFER" calibrate-confidence --log "$work/log.jsonl"
expect_eq "the fit's temperatures are above 1 for a head that is too sharp" \
  "$("$DEEPINFER" calibrate-confidence --log "$work/log.jsonl" --json |
     node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).dspark_confidence_temperatures.every(t => t > 1.2 && t < 3.5)))')" \
  "true"
expect_exit "--write" 0 "$DEEPINFER" calibrate-confidence --log "$work/log.jsonl" --model "$work" --write
expect_eq "--write stores the temperatures after the config's own keys, in order" \
  "$(node -e 'const c = require(process.argv[1]); console.log(Object.keys(c).join(","), c.dspark_confidence_temperatures.length)' "$work/config.json")" \
  "model_type,dspark_block_size,vocab_size,dspark_confidence_temperatures 3"

printf '{"model_type": "deepseek_v41", "text_config": {"hidden_size": 8, "dspark_block_size": 3}}\n' >"$work/config.json"
expect_exit "--write into a nested text_config" 0 "$DEEPINFER" calibrate-confidence --log "$work/log.jsonl" --model "$work" --write
expect_eq "where the drafter's fields are" \
  "$(node -e 'const c = require(process.argv[1]); console.log(Object.keys(c.text_config).join(","), "dspark_confidence_temperatures" in c)' "$work/config.json")" \
  "hidden_size,dspark_block_size,dspark_confidence_temperatures false"

printf '{"dspark_block_size": 5}\n' >"$work/config.json"
expect_exit "a config of another block size is refused" 1 "$DEEPINFER" calibrate-confidence --log "$work/log.jsonl" --model "$work" --write
expect_eq "and left as it was" "$(cat "$work/config.json")" '{"dspark_block_size": 5}'
expect_exit "--log is required" 2 "$DEEPINFER" calibrate-confidence
expect_exit "--write needs --model" 2 "$DEEPINFER" calibrate-confidence --log "$work/log.jsonl" --write
expect_exit "a missing log" 1 "$DEEPINFER" calibrate-confidence --log "$work/none.jsonl"
echo '{"raw": [1, 2], "accepted": 5}' >"$work/bad.jsonl"
expect_exit "a malformed log" 1 "$DEEPINFER" calibrate-confidence --log "$work/bad.jsonl"
expect_exit "serve's --confidence-log needs --speculative static" 2 \
  "$DEEPINFER" serve --confidence-log "$work/x.jsonl" --speculative scheduled
finish

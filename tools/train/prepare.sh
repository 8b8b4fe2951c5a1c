#!/usr/bin/env bash
# Make the embedded model's training data here (no device needed): synthetic chat through
# `deepinfer render --train` (the server's own prompt code path) and Debian code through
# `deepinfer tokenize`, packed by pack.py into scratch/train/packed/ (carried to the device).
# Usage: tools/train/prepare.sh [path/to/deepinfer] [make_data.py options...]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
deepinfer=${1:-$root/build/deepinfer}
shift || true
data=$root/scratch/train/data
packed=$root/scratch/train/packed
rm -rf "$packed"
mkdir -p "$data" "$packed"

python3 "$root/tools/train/make_data.py" --out "$data" "$@"

# The held-out arithmetic prompts with their reference answers, as training-format requests
# (thinking on), for the held-out loss and the teacher-forced greedy check.
python3 - "$data/heldout_arithmetic.jsonl" "$data/heldout_arith_train_format.jsonl" <<'PY'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as g:
    for line in f:
        r = json.loads(line)
        msgs = r["messages"] + [{"role": "assistant", "content": r["content"], "reasoning_content": r["reasoning"]}]
        g.write(json.dumps({"model": "deepinfer-mini", "messages": msgs, "thinking": {"type": "enabled"}}) + "\n")
PY

for split in chat_train chat_test; do
  "$deepinfer" render --train --input "$data/$split.jsonl" > "$data/$split.rendered.jsonl"
  python3 "$root/tools/train/pack.py" "$packed" "$split" "$data/$split.rendered.jsonl"
done
"$deepinfer" render --train --input "$data/heldout_arith_train_format.jsonl" > "$data/heldout_arith.rendered.jsonl"
python3 "$root/tools/train/pack.py" "$packed" heldout_arith "$data/heldout_arith.rendered.jsonl"
for split in code_train code_test; do
  "$deepinfer" tokenize --jsonl --add-bos < "$data/$split.jsonl" > "$data/$split.ids.jsonl"
  python3 "$root/tools/train/pack.py" "$packed" "$split" "$data/$split.ids.jsonl"
done
cp "$data/data_stats.json" "$packed/"
du -sh "$packed"
total=$(du -sb "$packed" | cut -f1)
if [ "$total" -gt $((60 * 1024 * 1024)) ]; then echo "packed data is $total bytes, over 60 MiB" >&2; exit 1; fi

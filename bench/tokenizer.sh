#!/usr/bin/env bash
# Encode throughput, one thread: deepinfer's tokenizer against the Hugging Face `tokenizers` library
# (npm 0.23.2) on the same >= 10 MiB corpus in the same run. Prints both JSON lines, then the ratio.
#   bench/tokenizer.sh                      DeepSeek V4.1 tokenizer, 5 timed passes each
#   TOKENIZER=path/to/tokenizer.json REPS=3 CORPUS=path bench/tokenizer.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tokenizer=${TOKENIZER:-assets/tokenizer/deepseek_v41_tokenizer.json}
corpus=${CORPUS:-build/bench/tokenizer_corpus.jsonl}
reps=${REPS:-5}

[ -d node_modules/tokenizers ] || npm ci
[ -f "$corpus" ] || node tools/tokenizer_parity/make_bench_corpus.mjs "$corpus"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target tokenizer_throughput -j2 >/dev/null

# Single-sequence encodes never start the library's Rayon pool; these make sure of it.
export TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1 UV_THREADPOOL_SIZE=1
peer=$(node bench/tokenizer_peer.mjs --tokenizer "$tokenizer" --corpus "$corpus" --reps "$reps")
echo "$peer"
field() { node -e 'console.log(JSON.parse(process.argv[1])[process.argv[2]])' "$1" "$2"; }
ours=$(build/bench/tokenizer_throughput --tokenizer "$tokenizer" --corpus "$corpus" --reps "$reps" \
  --expect-tokens "$(field "$peer" total_tokens)" --expect-checksum "$(field "$peer" ids_fnv1a32)")
echo "$ours"
node -e '
const [peer, ours] = process.argv.slice(1).map((s) => JSON.parse(s));
console.log(`library ${peer.median_mb_per_s.toFixed(2)} MB/s, deepinfer ${ours.median_mb_per_s.toFixed(2)} MB/s, ` +
  `deepinfer/library ${(ours.median_mb_per_s / peer.median_mb_per_s).toFixed(2)}x`);' "$peer" "$ours"

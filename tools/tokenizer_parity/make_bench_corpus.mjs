// Writes the tokenizer throughput corpus: one JSON string (a document) per line, at least 10 MiB of
// UTF-8 text, mixed roughly like an inference server's prompts (code, English, other Latin languages,
// CJK, other scripts, chat with emoji, numbers and structured data). Deterministic on one machine.
//
//   node tools/tokenizer_parity/make_bench_corpus.mjs build/bench/tokenizer_corpus.jsonl
import fs from 'node:fs';
import path from 'node:path';
import * as src from './sources.mjs';

const out = process.argv[2];
if (!out) {
  console.error('usage: make_bench_corpus.mjs OUTPUT.jsonl');
  process.exit(2);
}
const targetBytes = 10 * 1024 * 1024;

const codeKinds = src.codeKinds.filter((kind) => src.codeFiles(kind).length > 0);
// [weight, piece maker]; a document repeats one maker until it reaches its size.
const documentKinds = [
  [40, (rng, n) => src.codeSnippet(rng, rng.pick(codeKinds), n)?.toString('utf8') ?? ''],
  [25, (rng, n) => src.englishProse(rng, n)],
  [10, (rng, n) => src.translatedProse(rng, 'latin', n)],
  [10, (rng, n) => src.translatedProse(rng, 'cjk', Math.ceil(n / 3))],
  [5, (rng, n) => src.translatedProse(rng, 'other_scripts', Math.ceil(n / 2))],
  [5, (rng, n) => src.englishProse(rng, Math.min(n, 200)) + ' ' + src.emojiText(rng) + '\n'],
  [5, (rng) => (rng.chance(0.5) ? src.structuredText(rng) : src.numberText(rng)) + '\n'],
];
const totalWeight = documentKinds.reduce((sum, [w]) => sum + w, 0);

const rng = new src.Rng(src.hashSeed('bench/tokenizer_corpus'));
fs.mkdirSync(path.dirname(path.resolve(out)), { recursive: true });
const lines = [];
let bytes = 0;
while (bytes < targetBytes) {
  let roll = rng.int(totalWeight);
  const [, makePiece] = documentKinds.find(([w]) => (roll -= w) < 0);
  const size = rng.logUniform(300, 24000);
  let document = '';
  for (let guard = 0; Buffer.byteLength(document) < size && guard < 200; guard++) {
    document += makePiece(rng, Math.min(4000, size - Buffer.byteLength(document) + 1));
  }
  if (document.length === 0) continue;
  lines.push(JSON.stringify(document));
  bytes += Buffer.byteLength(document);
}
fs.writeFileSync(out, lines.join('\n') + '\n');
console.log(`${out}: ${lines.length} documents, ${bytes} bytes of text`);

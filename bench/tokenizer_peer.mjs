// Encode throughput of the Hugging Face `tokenizers` library (npm 0.23.2, native Rust) on one thread,
// the peer bench/tokenizer_throughput.cpp is compared with. Prints one JSON line.
//
//   node bench/tokenizer_peer.mjs --tokenizer FILE --corpus build/bench/tokenizer_corpus.jsonl [--reps 5]
//
// Each document is encoded on its own (no batching), so the library's Rayon parallelism never starts;
// the variables below pin it off anyway, and the libuv pool that runs the async encode gets one thread.
// cpu_per_wall in the output (process CPU time over wall time during the timed passes) shows the
// result is one core's worth of work.
process.env.TOKENIZERS_PARALLELISM = 'false';
process.env.RAYON_NUM_THREADS = '1';
process.env.UV_THREADPOOL_SIZE = '1';

import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { Tokenizer } = createRequire(path.join(repoRoot, 'package.json'))('tokenizers');

function option(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i >= 0 && i + 1 < process.argv.length) return process.argv[i + 1];
  if (fallback === undefined) {
    console.error(`missing --${name}`);
    process.exit(2);
  }
  return fallback;
}

const tokenizerPath = option('tokenizer', path.join(repoRoot, 'assets/tokenizer/deepseek_v41_tokenizer.json'));
const corpusPath = option('corpus');
const reps = Number(option('reps', '5'));

const documents = fs.readFileSync(corpusPath, 'utf8').split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l));
const corpusBytes = documents.reduce((sum, d) => sum + Buffer.byteLength(d, 'utf8'), 0);
const tokenizer = Tokenizer.fromFile(tokenizerPath);
const options = { addSpecialTokens: false };

// Untimed first pass: warms caches and yields the count and checksum the C++ side must match.
let totalTokens = 0;
let checksum = 0x811c9dc5;  // FNV-1a over every id's four little-endian bytes, in corpus order
for (const document of documents) {
  const ids = (await tokenizer.encode(document, null, options)).getIds();
  totalTokens += ids.length;
  for (const id of ids) {
    for (let shift = 0; shift < 32; shift += 8) checksum = Math.imul(checksum ^ ((id >>> shift) & 0xff), 0x01000193) >>> 0;
  }
}

const rates = [];
const cpuStart = process.cpuUsage();
const wallStart = process.hrtime.bigint();
for (let rep = 0; rep < reps; rep++) {
  const start = process.hrtime.bigint();
  let tokens = 0;
  for (const document of documents) tokens += (await tokenizer.encode(document, null, options)).getIds().length;
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  if (tokens !== totalTokens) throw new Error(`pass ${rep} made ${tokens} tokens, first pass ${totalTokens}`);
  rates.push(corpusBytes / 1e6 / seconds);
}
const cpu = process.cpuUsage(cpuStart);
const wallMicros = Number(process.hrtime.bigint() - wallStart) / 1e3;
const threads = Number(/^Threads:\s+(\d+)/m.exec(fs.readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0);

const sorted = [...rates].sort((a, b) => a - b);
console.log(JSON.stringify({
  impl: 'hf-tokenizers-0.23.2',
  tokenizer: path.basename(tokenizerPath),
  documents: documents.length,
  corpus_bytes: corpusBytes,
  reps,
  median_mb_per_s: Number(sorted[Math.floor(sorted.length / 2)].toFixed(3)),
  mb_per_s: rates.map((r) => Number(r.toFixed(3))),
  total_tokens: totalTokens,
  ids_fnv1a32: checksum,
  cpu_per_wall: Number(((cpu.user + cpu.system) / wallMicros).toFixed(3)),
  process_threads: threads,
}));

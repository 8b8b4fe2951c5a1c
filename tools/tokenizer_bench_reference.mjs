// The Hugging Face library's single-thread encode throughput on the same corpus as
// bench/tokenizer_bench (documents separated by NUL bytes), encoding one document at a time.
// Usage: TOKENIZERS_PARALLELISM=false node tools/tokenizer_bench_reference.mjs tokenizer.json corpus
import { createRequire } from 'node:module';
import fs from 'node:fs';
const require = createRequire(import.meta.url);
const { Tokenizer } = require('tokenizers');

const [path, corpus] = process.argv.slice(2);
let start = performance.now();
const tokenizer = Tokenizer.fromFile(path);
console.log(`load ${path}: ${((performance.now() - start) / 1000).toFixed(3)} s`);
const documents = fs.readFileSync(corpus).toString('utf8').split('\0').filter((d) => d.length);
const bytes = documents.reduce((n, d) => n + Buffer.byteLength(d), 0);
for (let pass = 0; pass < 3; pass++) {
  start = performance.now();
  let tokens = 0;
  for (const d of documents) tokens += (await tokenizer.encode(d, null, { addSpecialTokens: false })).getIds().length;
  const seconds = (performance.now() - start) / 1000;
  console.log(`pass ${pass}: ${documents.length} documents, ${(bytes / 1e6).toFixed(2)} MB, ${tokens} tokens, ` +
    `${seconds.toFixed(3)} s, ${(bytes / 1e6 / seconds).toFixed(1)} MB/s`);
}

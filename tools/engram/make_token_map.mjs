// Writes tests/data/engram/token_map_v41.safetensors: the Engram compressed token map of
// assets/tokenizer/deepseek_v41_tokenizer.json as computed with the Hugging Face `tokenizers`
// library (npm 0.23.2), following transformers' deepseek_v41 build_compressed_token_map: decode
// each id alone (special tokens kept); a text holding U+FFFD is keyed by the raw token string,
// any other by its normalized form (or the text itself when that is empty); new keys get
// consecutive ids in token-id order.
//
// The library renumbers added tokens whose JSON ids leave gaps (the asset's ids 128815.. are
// packed), so its ids agree with the file's (and deepinfer's) only below the first gap. The map is
// kept for that common prefix: it is the part both sides can be compared on, and since ids are
// assigned in token-id order, a prefix of the map does not depend on what follows it.
//
// Usage: node tools/engram/make_token_map.mjs [tokenizer.json] [out.safetensors]
import { createRequire } from 'node:module';
import fs from 'node:fs';
const require = createRequire(import.meta.url);
const { Tokenizer } = require('tokenizers');

const tokenizerPath = process.argv[2] ?? 'assets/tokenizer/deepseek_v41_tokenizer.json';
const outPath = process.argv[3] ?? 'tests/data/engram/token_map_v41.safetensors';
const json = fs.readFileSync(tokenizerPath, 'utf8');
const spec = JSON.parse(json);

// The normalizer of build_compressed_token_map, built through the JSON form so the two Replace
// steps get real Regex patterns.
spec.normalizer = {
  type: 'Sequence',
  normalizers: [
    { type: 'NFKC' }, { type: 'NFD' }, { type: 'StripAccents' }, { type: 'Lowercase' },
    { type: 'Replace', pattern: { Regex: '[ \\t\\r\\n]+' }, content: ' ' },
    { type: 'Replace', pattern: { Regex: '^ $' }, content: '\ue000' },
    { type: 'Strip', strip_left: true, strip_right: true },
    { type: 'Replace', pattern: { String: '\ue000' }, content: ' ' },
  ],
};
const tokenizer = Tokenizer.fromString(JSON.stringify(spec));
const normalizer = tokenizer.getNormalizer();

// Token strings by the file's ids, to find where the library's ids stop agreeing with them.
const fileToken = new Map();
for (const [token, id] of Object.entries(spec.model.vocab)) fileToken.set(id, token);
for (const added of spec.added_tokens) fileToken.set(added.id, added.content);

const length = tokenizer.getVocabSize(true);  // len(tokenizer)
let common = 0;
while (common < length && tokenizer.idToToken(common) === fileToken.get(common)) ++common;

const ids = Array.from({ length: common }, (_, i) => [i]);
const texts = await tokenizer.decodeBatch(ids, false);
const keyToNew = new Map();
const map = new Int32Array(common);
for (let id = 0; id < common; ++id) {
  const text = texts[id];
  let key;
  if (text.includes('\ufffd')) key = tokenizer.idToToken(id);
  else key = normalizer.normalizeString(text) || text;
  if (!keyToNew.has(key)) keyToNew.set(key, keyToNew.size);
  map[id] = keyToNew.get(key);
}

// The size over the library's whole (packed) vocabulary: what transformers' reference checks
// against engram_compressed_vocab_size. deepinfer's map skips the file's id holes, so its size
// must equal this one even though its ids above the first hole differ.
const allTexts = await tokenizer.decodeBatch(Array.from({ length }, (_, i) => [i]), false);
const allKeys = new Set();
for (let id = 0; id < length; ++id) {
  const text = allTexts[id];
  allKeys.add(text.includes('\ufffd') ? tokenizer.idToToken(id) : normalizer.normalizeString(text) || text);
}

const header = JSON.stringify({
  __metadata__: {
    source: 'tools/engram/make_token_map.mjs with npm tokenizers 0.23.2',
    tokenizer: tokenizerPath,
    library_length: String(length),
    compressed_size_of_prefix: String(keyToNew.size),
    compressed_size_full: String(allKeys.size),
  },
  token_map: { dtype: 'I32', shape: [common], data_offsets: [0, common * 4] },
});
const padded = header + ' '.repeat((8 - (header.length % 8)) % 8);
const headerBytes = Buffer.from(padded, 'utf8');
const size = Buffer.alloc(8);
size.writeBigUInt64LE(BigInt(headerBytes.length));
const data = Buffer.from(map.buffer);  // little-endian on every platform this runs on
fs.mkdirSync(outPath.substring(0, outPath.lastIndexOf('/')), { recursive: true });
fs.writeFileSync(outPath, Buffer.concat([size, headerBytes, data]));
console.log(`${outPath}: ${common} ids (library length ${length}), ${keyToNew.size} compressed ids in the prefix, ${allKeys.size} in all`);

// Writes tests/data/tokenizer_parity/sample_dev.jsonl: a small parity sample produced by the
// Hugging Face `tokenizers` npm package (the reference), in the parity-corpus format.
// Usage: node tools/tokenizer_sample_dev.mjs [lines per tokenizer]
import { createRequire } from 'node:module';
import fs from 'node:fs';
const require = createRequire(import.meta.url);
const { Tokenizer } = require('tokenizers');

let seed = 12345;
const random = () => { seed = (seed + 0x6D2B79F5) | 0; let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t; return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
const pick = (list) => list[Math.floor(random() * list.length)];
const int = (n) => Math.floor(random() * n);

const words = ['the', 'quick', 'brown', 'fox', "don't", "it's", "we'll", 'HELLO', 'World', 'naïve', 'café',
  'über', 'Ünïcödé', 'straße', 'Привет', 'мир', 'γειά', 'σου', 'שלום', 'مرحبا', 'नमस्ते', 'ไทย', '한국어',
  '你好', '世界', '中文分词', '日本語', 'ひらがな', 'カタカナ', 'ｶﾀｶﾅ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'x²', '½', 'Ⅻ', '١٢٣', '１２３',
  '😀', '👍🏽', '👨‍👩‍👧', '🇺🇸', 'e\u0301', 'a\u0308\u0323', '—', '…', '«»', '“quoted”', '¿qué?', '€100', '$3.50',
  '1234567', '3.14159', '0x1F', 'foo_bar', 'camelCase', 'snake_case_var', '#include', '<div>', '</div>',
  '&amp;', '@user', 'http://example.com/a?b=c', 'ID:42', '\u00a0', '\u3000', '\u2028', '\u0085', '\u200b', '\ufeff'];
const spaces = [' ', ' ', ' ', '  ', '\t', '\n', '\n\n', '\r\n', ' \n ', '   ', '\u00a0', '\u3000', '\u2009', '\u0085', '\u000b', '\f'];
const code = ['def f(x):\n    return x + 1\n', 'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n',
  'const s = `${a}-${b}`;', 'SELECT * FROM t WHERE id = 42;', '{"key": [1, 2, 3], "v": null}', '#!/bin/sh\necho "$HOME"\n',
  '    if x:\n        pass\n\n\n', 'a=b+c*d/e-f%g^h|i&j~k', '$$\\frac{a}{b}$$', '// comment\n/* block */'];

function text(kind) {
  const n = 1 + int(12);
  let s = '';
  for (let i = 0; i < n; i++) {
    if (kind === 'code') s += pick(code);
    else if (kind === 'whitespace') s += pick(spaces) + (random() < 0.5 ? pick(words) : '') + pick(spaces);
    else if (kind === 'digits') s += String(int(10 ** (1 + int(9)))) + pick(['', ' ', ',', '.', 'px', '٣', '１']);
    else if (kind === 'unicode') {
      const ranges = [[0x20, 0x7f], [0xa0, 0x2000], [0x2000, 0x3000], [0x3000, 0xa000], [0xac00, 0xd7a4],
        [0xe000, 0x10000], [0x10000, 0x20000], [0x1e000, 0x1f000], [0x20000, 0x32000]];
      const [lo, hi] = pick(ranges);
      const cp = lo + int(hi - lo);
      if (cp >= 0xd800 && cp < 0xe000) continue;
      s += String.fromCodePoint(cp);
    } else s += pick(words) + pick(spaces);
  }
  return s;
}

function invalidBytes() {
  const parts = [];
  const n = 1 + int(10);
  for (let i = 0; i < n; i++) {
    const r = random();
    if (r < 0.3) parts.push(Buffer.from(pick(words)));
    else if (r < 0.6) parts.push(Buffer.from(Array.from({ length: 1 + int(4) }, () => int(256))));
    else parts.push(Buffer.from(pick(['😀', '你', 'é', '€'])).subarray(0, 1 + int(2)));
  }
  return Buffer.concat(parts);
}

async function main() {
  const perTokenizer = Number(process.argv[2] || 80);
  const out = [];
  const files = [
    ['deepseek_v41_tokenizer.json', 'assets/tokenizer/deepseek_v41_tokenizer.json'],
    ['deepseek_v3_tokenizer.json', 'assets/tokenizer/deepseek_v3_tokenizer.json'],
    ['gpt2_style_tokenizer.json', 'tests/data/tokenizer_parity/gpt2_style_tokenizer.json'],
  ];
  for (const [name, path] of files) {
    const tok = Tokenizer.fromFile(path);
    const json = JSON.parse(fs.readFileSync(path, 'utf8'));
    // Only added tokens whose declared id is the id the library assigns (see the tokenizer report).
    const added = json.added_tokens.filter((t) => tok.tokenToId(t.content) === t.id).map((t) => t.content);
    const kinds = ['prose', 'code', 'whitespace', 'digits', 'unicode', 'invalid_utf8', 'added_tokens', 'long'];
    for (let i = 0; i < perTokenizer; i++) {
      const category = kinds[i % kinds.length];
      let bytes;
      if (category === 'invalid_utf8') bytes = invalidBytes();
      else if (category === 'added_tokens') {
        let s = '';
        for (let k = 0; k < 1 + int(5); k++) s += pick([text('prose'), pick(added), pick(added), ' ' + pick(added) + ' ', pick(spaces)]);
        bytes = Buffer.from(s);
      } else if (category === 'long') bytes = Buffer.from(pick(['a', ' ', '1', '你', '\n', 'ab ', '😀']).repeat(100 + int(700)));
      else bytes = Buffer.from(text(category));
      const input = bytes.toString('utf8');  // WHATWG lossy decode: what the library encodes
      const encoding = await tok.encode(input, null, { addSpecialTokens: false });
      const ids = Array.from(encoding.getIds());
      out.push(JSON.stringify({ tokenizer: name, category, input_b64: bytes.toString('base64'), ids,
        decoded: await tok.decode(ids, false), decoded_skip_special: await tok.decode(ids, true) }));
    }
  }
  fs.writeFileSync('tests/data/tokenizer_parity/sample_dev.jsonl', out.join('\n') + '\n');
  console.log(`wrote ${out.length} lines`);
}
main();

// Builds the tokenizer parity corpora: inputs of every awkward kind, each with the ids, decode and
// skip-special decode that the Hugging Face `tokenizers` library (npm 0.23.2) gives for it.
//
//   node tools/tokenizer_parity/make_corpus.mjs            regenerate both corpora
//   node tools/tokenizer_parity/make_corpus.mjs --check    re-encode the committed corpora, compare
//
// Inputs are raw bytes (input_b64). The library takes text, so bytes go through Node's lossy UTF-8
// decode first; that decode replaces invalid sequences exactly as Rust's String::from_utf8_lossy
// does (see README.md), which is what deepinfer's encode() promises to do with bytes.
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import * as src from './sources.mjs';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const require = createRequire(path.join(repoRoot, 'package.json'));
const { Tokenizer } = require('tokenizers');
const dataDir = path.join(repoRoot, 'tests', 'data', 'tokenizer_parity');

// The library numbers added tokens in file order, one after another, ignoring the "id" written in
// tokenizer.json. Where the file's added-token ids have gaps (our V4.1 file is a reconstruction
// missing 445 ids) every token after the first gap ends up with a different id than the file says,
// e.g. <think> becomes 128815 instead of 128821, while the real V4.1 file (no gaps) gives 128821.
// To record the ids the real file gives, the reference fills each gap with a placeholder token that
// can never occur in the corpus, then checks every added token lands on its declared id.
function loadReference(file) {
  const json = JSON.parse(fs.readFileSync(file, 'utf8'));
  const vocabSize = Object.keys(json.model.vocab).length;
  const declared = new Map(json.added_tokens.map((t) => [t.id, t]));
  const maxId = Math.max(...declared.keys());
  const filled = [];
  let gaps = 0;
  for (let id = 0; id <= maxId; id++) {
    if (declared.has(id)) filled.push(declared.get(id));
    else if (id >= vocabSize) {
      gaps++;
      filled.push({ id, content: `<｜deepinfer▁parity▁gap▁${id}｜>`, single_word: false, lstrip: false, rstrip: false,
        normalized: false, special: true });
    }
  }
  json.added_tokens = filled;
  const tokenizer = Tokenizer.fromString(JSON.stringify(json));
  for (const token of declared.values()) {
    const got = tokenizer.tokenToId(token.content);
    if (got !== token.id) throw new Error(`${file}: added token ${token.content} has id ${got}, declared ${token.id}`);
  }
  const asFile = Tokenizer.fromFile(file);
  const renumbered = [...declared.values()].filter((t) => asFile.tokenToId(t.content) !== t.id);
  return { tokenizer, asFile, gaps, renumbered, addedTokens: [...declared.values()].map((t) => t.content) };
}

// ---------------------------------------------------------------- categories

const snippetLength = (rng) => (rng.chance(0.03) ? rng.logUniform(500, 2500) : rng.logUniform(4, 330));
// Scripts of two or three UTF-8 bytes a character get fewer characters, for similar byte sizes.
const wideSnippetLength = (rng) => Math.max(2, Math.round(snippetLength(rng) / 2.5));

function addedTokenText(rng, tokens, index) {
  // The first pass walks every added token in order, three to a line; later lines mix at random.
  const pick = () => rng.pick(tokens);
  const partial = (t) => t.slice(0, 1 + rng.int(Math.max(1, [...t].length - 1)));
  const sep = () => rng.pick(['', '', ' ', '  ', '\n', 'x', '中', '😀', '\t', ' \n ', '.']);
  const around = (t) => rng.pick([t, ' ' + t, t + ' ', ' ' + t + ' ', '\n' + t + '\n', 'a' + t + 'b', '1' + t + '2']);
  if (index * 3 < tokens.length) {
    return tokens.slice(index * 3, index * 3 + 3).map((t) => around(t) + sep() + src.englishWord(rng)).join(sep());
  }
  switch (rng.int(7)) {
    case 0: return Array.from({ length: rng.range(2, 8) }, pick).join('');  // adjacent
    case 1: return Array.from({ length: rng.range(1, 5) }, () => around(pick())).join(sep());
    case 2: return Array.from({ length: rng.range(1, 4) }, () => partial(pick()) + sep()).join('') + rng.pick(['<｜User', '<think', '</think', '<｜', '｜>', '<|', '|>', '<｜DSML', '▁', '｜']);
    case 3: {  // nested: one token inside another, or inside its own partial
      const outer = pick(), inner = pick();
      const cut = 1 + rng.int(Math.max(1, outer.length - 1));
      return outer.slice(0, cut) + inner + outer.slice(cut);
    }
    case 4: return '<｜User｜>' + src.translatedProse(rng, rng.pick(['latin', 'cjk']), rng.range(5, 80)) + '<｜Assistant｜><think>' + src.englishProse(rng, 60) + '</think>' + src.englishWord(rng) + '<｜end▁of▁sentence｜>';
    case 5: return pick().toUpperCase() + sep() + pick().replace(/▁/g, ' ') + sep() + pick().replace(/｜/g, '|');  // near misses
    default: return `<｜DSML｜ invoke name="${src.englishWord(rng)}">\n<｜DSML｜ parameter name="x" string="true">${src.emojiText(rng)}</｜DSML｜ parameter>\n</｜DSML｜ invoke>`;
  }
}

function categoryMakers(tokens) {
  const makers = {};
  for (const kind of src.codeKinds) {
    if (src.codeFiles(kind).length > 0) makers[kind] = (rng) => src.codeSnippet(rng, kind, snippetLength(rng));
  }
  Object.assign(makers, {
    prose_english: (rng) => src.englishProse(rng, snippetLength(rng)),
    prose_latin: (rng) => src.translatedProse(rng, 'latin', snippetLength(rng)),
    cjk: (rng) => (rng.chance(0.2) ? src.randomCjk(rng) : src.translatedProse(rng, 'cjk', wideSnippetLength(rng))),
    other_scripts: (rng) => src.translatedProse(rng, 'other_scripts', wideSnippetLength(rng)),
    emoji: (rng) => src.emojiText(rng),
    combining_marks: (rng) => src.combiningText(rng),
    numbers: (rng) => Array.from({ length: rng.range(1, 3) }, () => src.numberText(rng)).join(rng.pick([' ', '\n', '', ', '])),
    whitespace: (rng) => src.whitespaceText(rng),
    added_tokens: (rng, index) => addedTokenText(rng, tokens, index),
    punctuation: (rng) => src.punctuationText(rng),
    urls_json_markdown: (rng) => (rng.chance(0.25) ? src.markdownSnippet(rng, snippetLength(rng)) : src.structuredText(rng)),
    mixed_script_random: (rng) => src.randomCodePoints(rng),
    invalid_utf8: (rng) => src.invalidUtf8(rng, rng.chance(0.5) ? src.englishProse(rng, rng.range(5, 60)) : src.translatedProse(rng, rng.pick(['cjk', 'other_scripts', 'latin']), rng.range(5, 60))),
    long_words: (rng, index) => src.longWord(rng, [1000, 20000, 5000, 2000, 12000, 1500, 8000, 3000][index % 8]),
  });
  return makers;
}

const v41Counts = {
  code_c: 850, code_python: 850, code_shell: 400, code_js: 600, code_rust: 450, code_perl: 400, code_java: 200,
  code_cmake: 250, prose_english: 700, prose_latin: 750, cjk: 900, other_scripts: 850, emoji: 500,
  combining_marks: 300, numbers: 550, whitespace: 500, added_tokens: 700, punctuation: 350,
  urls_json_markdown: 450, mixed_script_random: 550, invalid_utf8: 700, long_words: 8,
};
const gpt2Counts = Object.fromEntries(Object.entries(v41Counts).map(([k, n]) => [k, k === 'long_words' ? 2 : Math.max(20, Math.round(n * 0.135))]));

const corpora = [
  { name: 'v41', tokenizerFile: path.join(repoRoot, 'assets', 'tokenizer', 'deepseek_v41_tokenizer.json'),
    out: path.join(dataDir, 'v41_corpus.jsonl'), counts: v41Counts },
  { name: 'gpt2', tokenizerFile: path.join(dataDir, 'gpt2_tokenizer.json'),
    out: path.join(dataDir, 'gpt2_corpus.jsonl'), counts: gpt2Counts },
];

async function encodeRecord(tokenizer, tokenizerName, category, bytes) {
  const text = bytes.toString('utf8');  // lossy, same replacement rule as from_utf8_lossy
  const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
  const ids = encoding.getIds();
  return {
    tokenizer: tokenizerName, category, input_b64: bytes.toString('base64'), ids,
    decoded: await tokenizer.decode(ids, false), decoded_skip_special: await tokenizer.decode(ids, true),
  };
}

async function build(corpus) {
  const reference = loadReference(corpus.tokenizerFile);
  const tokenizerName = path.basename(corpus.tokenizerFile);
  const makers = categoryMakers(reference.addedTokens);
  const lines = [];
  const summary = {};
  const seen = new Set();
  let renumberedLines = 0;
  for (const [category, count] of Object.entries(corpus.counts)) {
    const make = makers[category];
    if (!make) { summary[category] = 0; continue; }  // no such files on this machine
    const rng = new src.Rng(src.hashSeed(`${corpus.name}/${category}`));
    let made = 0;
    for (let attempt = 0; made < count && attempt < count * 4; attempt++) {
      let input = make(rng, made);
      if (input === null || input.length === 0) continue;
      const bytes = Buffer.isBuffer(input) ? input : Buffer.from(input, 'utf8');
      const key = bytes.toString('base64');
      if (seen.has(key)) continue;
      seen.add(key);
      const record = await encodeRecord(reference.tokenizer, tokenizerName, category, bytes);
      if (reference.renumbered.length > 0) {
        const plain = (await reference.asFile.encode(bytes.toString('utf8'), null, { addSpecialTokens: false })).getIds();
        if (plain.join() !== record.ids.join()) renumberedLines++;
      }
      lines.push(JSON.stringify(record));
      made++;
    }
    summary[category] = made;
  }
  const text = lines.join('\n') + '\n';
  fs.writeFileSync(corpus.out, text);
  return { summary, lines: lines.length, bytes: Buffer.byteLength(text), sha256: crypto.createHash('sha256').update(text).digest('hex'),
    gaps: reference.gaps, renumbered: reference.renumbered.map((t) => t.content), renumberedLines };
}

async function check(corpus) {
  const reference = loadReference(corpus.tokenizerFile);
  const lines = fs.readFileSync(corpus.out, 'utf8').split('\n').filter((l) => l.length > 0);
  let mismatches = 0;
  for (const line of lines) {
    const want = JSON.parse(line);
    const got = await encodeRecord(reference.tokenizer, want.tokenizer, want.category, Buffer.from(want.input_b64, 'base64'));
    if (JSON.stringify(got) !== line) {
      if (++mismatches <= 5) console.error(`mismatch in ${corpus.out}: ${line.slice(0, 200)}`);
    }
  }
  return { lines: lines.length, mismatches };
}

const checking = process.argv.includes('--check');
let failed = false;
for (const corpus of corpora) {
  if (checking) {
    const result = await check(corpus);
    console.log(`${path.relative(repoRoot, corpus.out)}: ${result.lines} lines re-encoded, ${result.mismatches} mismatches`);
    failed ||= result.mismatches > 0;
  } else {
    const result = await build(corpus);
    console.log(`${path.relative(repoRoot, corpus.out)}: ${result.lines} lines, ${result.bytes} bytes, sha256 ${result.sha256}`);
    for (const [category, n] of Object.entries(result.summary)) console.log(`  ${category.padEnd(22)} ${n}`);
    if (result.renumbered.length > 0) {
      console.log(`  note: ${result.gaps} gap ids filled; fromFile() alone would renumber ${result.renumbered.length} added tokens ` +
        `(${result.renumbered.join(' ')}), changing the ids of ${result.renumberedLines} lines`);
    }
  }
}
process.exit(failed ? 1 : 0);

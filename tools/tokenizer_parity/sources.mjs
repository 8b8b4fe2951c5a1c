// Text sources and generators shared by make_corpus.mjs (parity vectors) and make_bench_corpus.mjs
// (throughput corpus). Everything is driven by a seeded PRNG and by files walked in sorted order,
// so the same machine produces the same bytes on every run.
import fs from 'node:fs';
import path from 'node:path';
import os from 'node:os';
import zlib from 'node:zlib';

// ---------------------------------------------------------------- deterministic randomness

export function hashSeed(text) {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) h = Math.imul(h ^ byte, 0x01000193) >>> 0;
  return h;
}

// mulberry32: tiny, fast and good enough to pick snippets; not for anything cryptographic.
export class Rng {
  constructor(seed) { this.state = seed >>> 0; }
  next() {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(n) { return Math.floor(this.next() * n); }
  range(lo, hi) { return lo + this.int(hi - lo + 1); }  // inclusive
  chance(p) { return this.next() < p; }
  pick(list) { return list[this.int(list.length)]; }
  // Log-uniform in [lo, hi]: many short items, a tail of long ones.
  logUniform(lo, hi) { return Math.floor(Math.exp(Math.log(lo) + this.next() * (Math.log(hi) - Math.log(lo)))); }
}

// ---------------------------------------------------------------- files on this machine

// Sorted, bounded walk: deterministic and fast even over /usr.
export function walkFiles(root, accept, { maxFiles = 4000, maxDepth = 12 } = {}) {
  const found = [];
  const visit = (dir, depth) => {
    if (found.length >= maxFiles || depth > maxDepth) return;
    let entries;
    try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return; }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      if (found.length >= maxFiles) return;
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) visit(full, depth + 1);
      else if (entry.isFile() && accept(full)) found.push(full);
    }
  };
  visit(root, 0);
  return found;
}

function readHead(file, maxBytes = 256 * 1024) {
  try {
    const fd = fs.openSync(file, 'r');
    const buffer = Buffer.alloc(maxBytes);
    const n = fs.readSync(fd, buffer, 0, maxBytes, 0);
    fs.closeSync(fd);
    let data = buffer.subarray(0, n);
    if (file.endsWith('.gz')) data = zlib.gunzipSync(data, { finishFlush: zlib.constants.Z_SYNC_FLUSH });
    return data;
  } catch { return Buffer.alloc(0); }
}

function isShellScript(file) {
  const head = readHead(file, 64).toString('latin1');
  return /^#!\s*\/(usr\/)?bin\/(env\s+)?(ba|da|z)?sh\b/.test(head);
}

function rustdocToSource(html) {
  // rustdoc's src pages hold the file as <code> with a numbered anchor per line.
  const start = html.indexOf('<code>');
  const end = html.lastIndexOf('</code>');
  if (start < 0 || end < 0) return '';
  return html.slice(start + 6, end)
    .replace(/<a [^>]*data-nosnippet>\d+<\/a>/g, '')
    .replace(/<[^>]+>/g, '')
    .replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&#39;/g, "'")
    .replace(/&amp;/g, '&');
}

const home = os.homedir();
const rustDocSrc = (() => {
  const toolchains = path.join(home, '.rustup', 'toolchains');
  try {
    for (const name of fs.readdirSync(toolchains).sort()) {
      const dir = path.join(toolchains, name, 'share', 'doc', 'rust', 'html', 'src');
      if (fs.existsSync(dir)) return dir;
    }
  } catch { /* no rustup */ }
  return null;
})();

// Each code source: a list of files and a loader returning the file's bytes.
const codeSourceSpecs = {
  code_c: () => walkFiles('/usr/include', (f) => /\.(h|hpp|hh|hxx|tcc)$/.test(f), { maxFiles: 3000 }),
  code_python: () => walkFiles('/usr/lib/python3.11', (f) => f.endsWith('.py'), { maxFiles: 3000 }),
  code_shell: () => [
    ...walkFiles('/usr/bin', isShellScript, { maxFiles: 400, maxDepth: 0 }),
    ...walkFiles('/usr/share', (f) => f.endsWith('.sh'), { maxFiles: 400 }),
    ...walkFiles('/etc', (f) => f.endsWith('.sh') || f.includes('/init.d/'), { maxFiles: 200 }),
  ],
  code_js: () => [
    ...walkFiles('/usr/lib/node_modules', (f) => f.endsWith('.js') && !f.endsWith('.min.js'), { maxFiles: 2000 }),
    ...walkFiles('/usr/share', (f) => f.endsWith('.js') && !f.endsWith('.min.js'), { maxFiles: 300 }),
  ],
  code_rust: () => [
    ...walkFiles(path.join(home, '.cargo'), (f) => f.endsWith('.rs'), { maxFiles: 1000 }),
    ...(rustDocSrc ? walkFiles(rustDocSrc, (f) => f.endsWith('.rs.html'), { maxFiles: 1000 }) : []),
  ],
  code_perl: () => [
    ...walkFiles('/usr/share/perl', (f) => /\.(pm|pl)$/.test(f), { maxFiles: 1000 }),
    ...walkFiles('/usr/share/perl5', (f) => /\.(pm|pl)$/.test(f), { maxFiles: 1000 }),
    ...walkFiles('/usr/lib/x86_64-linux-gnu/perl', (f) => /\.(pm|pl)$/.test(f), { maxFiles: 500 }),
  ],
  code_java: () => [
    ...walkFiles('/usr/share', (f) => f.endsWith('.java'), { maxFiles: 500 }),
    ...walkFiles('/usr/lib/jvm', (f) => f.endsWith('.java'), { maxFiles: 500 }),
  ],
  code_cmake: () => walkFiles('/usr/share', (f) => f.endsWith('.cmake') || f.endsWith('CMakeLists.txt'), { maxFiles: 1200 }),
};

const cache = new Map();
function memo(key, build) {
  if (!cache.has(key)) cache.set(key, build());
  return cache.get(key);
}

export function codeFiles(kind) { return memo('files:' + kind, () => codeSourceSpecs[kind]()); }
export const codeKinds = Object.keys(codeSourceSpecs);

function fileBytes(file) {
  return memo('bytes:' + file, () => {
    if (file.endsWith('.rs.html')) return Buffer.from(rustdocToSource(readHead(file, 2 * 1024 * 1024).toString('utf8')), 'utf8');
    return readHead(file);
  });
}

// A run of whole lines from a random file of `kind`, about `targetBytes` long. Bytes are taken as
// they are in the file, so the odd Latin-1 file contributes genuinely invalid UTF-8.
export function codeSnippet(rng, kind, targetBytes) {
  const files = codeFiles(kind);
  if (files.length === 0) return null;
  for (let attempt = 0; attempt < 8; attempt++) {
    const data = fileBytes(rng.pick(files));
    if (data.length < 16) continue;
    let start = rng.int(data.length);
    const lineStart = data.lastIndexOf(0x0a, start);
    start = lineStart < 0 ? 0 : lineStart + 1;
    let end = Math.min(data.length, start + targetBytes);
    const lineEnd = data.indexOf(0x0a, end);
    if (lineEnd >= 0 && lineEnd - start < targetBytes * 1.5 + 80) end = lineEnd + 1;
    if (end - start < 2) continue;
    return Buffer.from(data.subarray(start, end));
  }
  return null;
}

// ---------------------------------------------------------------- prose from gettext catalogues

// Parses a GNU .mo file; returns [msgid, msgstr] pairs (plural forms joined by newlines).
function parseMo(data) {
  if (data.length < 28) return [];
  const magic = data.readUInt32LE(0);
  const read = magic === 0x950412de ? (o) => data.readUInt32LE(o) : magic === 0xde120495 ? (o) => data.readUInt32BE(o) : null;
  if (!read) return [];
  const count = read(8), originals = read(12), translations = read(16);
  const pairs = [];
  const text = (table, i) => {
    const length = read(table + i * 8), offset = read(table + i * 8 + 4);
    if (offset + length > data.length) return null;
    return data.subarray(offset, offset + length).toString('utf8').replace(/^[^\x04]*\x04/, '').replace(/\0/g, '\n');
  };
  for (let i = 0; i < count; i++) {
    const id = text(originals, i), str = text(translations, i);
    if (id === null || str === null || id === '' || str === '') continue;
    pairs.push([id, str]);
  }
  return pairs;
}

const localeDir = '/usr/share/locale';
export const languageGroups = {
  latin: ['de', 'fr', 'es', 'it', 'pt', 'pt_BR', 'pl', 'cs', 'sv', 'nl', 'fi', 'ro', 'hu', 'tr', 'vi', 'ca', 'da', 'nb',
    'sk', 'hr', 'sl', 'et', 'lt', 'lv', 'eo', 'id', 'ga', 'eu', 'gl', 'af', 'cy'],
  cjk: ['zh_CN', 'zh_TW', 'zh_HK', 'ja', 'ko'],
  other_scripts: ['ar', 'he', 'fa', 'ur', 'hi', 'mr', 'bn', 'ta', 'te', 'gu', 'pa', 'kn', 'ml', 'si', 'th', 'km', 'lo',
    'my', 'ru', 'uk', 'bg', 'sr', 'be', 'mk', 'kk', 'el', 'ka', 'hy', 'am'],
};

// Translated messages per language, each catalogue's messages kept in order (neighbours read on).
export function catalogues(language) {
  return memo('mo:' + language, () => {
    const dir = path.join(localeDir, language, 'LC_MESSAGES');
    const files = walkFiles(dir, (f) => f.endsWith('.mo'), { maxFiles: 200, maxDepth: 0 });
    return files.map((f) => parseMo(readHead(f, 8 * 1024 * 1024))).filter((pairs) => pairs.length > 0);
  });
}

function messageRun(rng, pairs, side, targetChars) {
  let i = rng.int(pairs.length);
  let out = '';
  while (out.length < targetChars && i < pairs.length) {
    const piece = pairs[i++][side];
    out += out === '' ? piece : rng.pick([' ', ' ', '\n', '\n\n', ' ']) + piece;
  }
  // One help text can run to pages; keep the item near its target (cut at a code point boundary).
  const points = [...out];
  return points.length > targetChars * 1.5 + 20 ? points.slice(0, Math.ceil(targetChars * 1.5) + 20).join('') : out;
}

// Translated prose in one language of the group, about `targetChars` long.
export function translatedProse(rng, group, targetChars) {
  const languages = languageGroups[group].filter((l) => catalogues(l).length > 0);
  const cats = catalogues(rng.pick(languages));
  return messageRun(rng, rng.pick(cats), 1, targetChars);
}

const englishDocFiles = () => memo('english-docs', () => [
  ...walkFiles('/usr/share/common-licenses', () => true, { maxFiles: 100 }),
  ...walkFiles('/usr/share/doc', (f) => /\/(copyright|README(\.txt|\.md)?|NEWS|changelog\.Debian\.gz|changelog\.gz|NEWS\.gz|README\.gz)$/.test(f), { maxFiles: 2500, maxDepth: 3 }),
]);

// English: message ids from the catalogues, or lines from licences, READMEs and changelogs.
export function englishProse(rng, targetChars) {
  if (rng.chance(0.5)) {
    const cats = catalogues(rng.pick(['de', 'fr', 'es', 'ja', 'ru']));
    return messageRun(rng, rng.pick(cats), 0, targetChars);
  }
  const files = englishDocFiles();
  for (let attempt = 0; attempt < 8; attempt++) {
    const text = fileBytes(rng.pick(files)).toString('utf8');
    if (text.length < 40) continue;
    let start = text.lastIndexOf('\n', rng.int(text.length)) + 1;
    let end = text.indexOf('\n', Math.min(text.length, start + targetChars));
    if (end < 0) end = text.length;
    const piece = text.slice(start, end);
    if (piece.trim().length > 0) return piece;
  }
  return 'The quick brown fox jumps over the lazy dog.';
}

export function markdownFiles() {
  return memo('md', () => walkFiles('/usr/share/doc', (f) => f.endsWith('.md'), { maxFiles: 400 }));
}

export function markdownSnippet(rng, targetBytes) {
  const files = markdownFiles();
  if (files.length === 0) return null;
  const data = fileBytes(rng.pick(files));
  let start = data.lastIndexOf(0x0a, rng.int(Math.max(1, data.length))) + 1;
  return Buffer.from(data.subarray(start, Math.min(data.length, start + targetBytes)));
}

// ---------------------------------------------------------------- generated text

const cp = (n) => String.fromCodePoint(n);
const fromRange = (rng, lo, hi) => cp(rng.range(lo, hi));
const repeat = (n, make) => Array.from({ length: n }, make).join('');

const emojiBases = [[0x1f600, 0x1f64f], [0x1f300, 0x1f5ff], [0x1f680, 0x1f6ff], [0x1f900, 0x1f9ff], [0x1fa70, 0x1faff],
  [0x2600, 0x26ff], [0x2700, 0x27bf]];
const zwjSequences = ['👨‍👩‍👧‍👦', '👩‍💻', '🏳️‍🌈', '🧑🏽‍🚀', '👩🏾‍🤝‍👨🏻', '❤️‍🔥', '🐻‍❄️', '👁️‍🗨️', '🧔‍♀️', '🏃🏿‍♂️‍➡️', '😮‍💨', '🫱🏼‍🫲🏿'];
const tagFlags = ['🏴󠁧󠁢󠁥󠁮󠁧󠁿', '🏴󠁧󠁢󠁳󠁣󠁴󠁿', '🏴󠁧󠁢󠁷󠁬󠁳󠁿'];
const realFlags = ['US', 'FR', 'JP', 'CN', 'DE', 'IN', 'BR', 'KR', 'UA', 'ZA', 'EU', 'UN'];

export function emoji(rng) {
  const kind = rng.int(8);
  if (kind === 0) return rng.pick(zwjSequences);
  if (kind === 1) return rng.pick(tagFlags);
  if (kind === 2) {  // flag: a real one or any regional-indicator pair
    const letters = rng.chance(0.6) ? rng.pick(realFlags) : cp(0x41 + rng.int(26)) + cp(0x41 + rng.int(26));
    return [...letters].map((c) => cp(0x1f1e6 + c.charCodeAt(0) - 0x41)).join('');
  }
  if (kind === 3) return rng.pick('0123456789#*') + (rng.chance(0.7) ? '\ufe0f' : '') + '\u20e3';  // keycap
  const [lo, hi] = rng.pick(emojiBases);
  let e = fromRange(rng, lo, hi);
  if (kind === 4) e += fromRange(rng, 0x1f3fb, 0x1f3ff);  // skin tone
  if (kind === 5) e += rng.pick(['\ufe0f', '\ufe0e']);
  if (kind === 6) e += '\u200d' + fromRange(rng, lo, hi);
  return e;
}

const words = ('the of and to in is was for that with as on by at from this be are or an it not which have ' +
  'tokenizer model token byte pair merge vocabulary encode decode text string unicode space number').split(' ');
export const englishWord = (rng) => rng.pick(words);

export function emojiText(rng) {
  const n = rng.logUniform(1, 40);
  let out = '';
  for (let i = 0; i < n; i++) {
    const r = rng.int(4);
    if (r === 0) out += englishWord(rng) + ' ';
    else if (r === 1) out += emoji(rng) + rng.pick(['', ' ', '\n', '!', '']);
    else out += emoji(rng);
  }
  return out;
}

const combiningRanges = [[0x0300, 0x036f], [0x1ab0, 0x1aff], [0x1dc0, 0x1dff], [0x20d0, 0x20ff], [0xfe20, 0xfe2f]];
export function combiningText(rng) {
  const kind = rng.int(6);
  if (kind === 0) {  // zalgo
    return repeat(rng.range(1, 30), () => cp(0x61 + rng.int(26)) + repeat(rng.range(0, 8), () => {
      const [lo, hi] = rng.pick(combiningRanges); return fromRange(rng, lo, hi);
    }));
  }
  if (kind === 1) {  // decomposed (NFD) Latin and Vietnamese next to composed forms
    const s = rng.pick(['Crème brûlée à la française', 'Tiếng Việt có dấu', 'Ångström naïve café résumé', 'Übermäßig größer', 'ñandú pingüino']);
    return rng.chance(0.5) ? s.normalize('NFD') : s.normalize('NFD') + ' / ' + s;
  }
  if (kind === 2) {  // Hangul as conjoining jamo
    return repeat(rng.range(1, 12), () => fromRange(rng, 0x1100, 0x1112) + fromRange(rng, 0x1161, 0x1175) + (rng.chance(0.5) ? fromRange(rng, 0x11a8, 0x11c2) : ''));
  }
  if (kind === 3) {  // Devanagari / Thai / Hebrew / Arabic marks
    return rng.pick(['क्षत्रिय', 'संस्कृतम्', 'ภาษาไทย์่้๊๋', 'שָׁלוֹם עֲלֵיכֶם', 'بِسْمِ اللَّهِ', 'ক্ষ্মী']) + rng.pick(['', ' ', '\n']) + fromRange(rng, 0x0900, 0x097f);
  }
  if (kind === 4) {  // a mark with no base, or at the very start
    const [lo, hi] = rng.pick(combiningRanges);
    return fromRange(rng, lo, hi) + rng.pick(['', 'a', ' ', '1', '\n']) + fromRange(rng, lo, hi);
  }
  return englishWord(rng) + '\u0301 ' + englishWord(rng) + '\u20dd' + ' x\u0336y\u0336z\u0336 ' + '1\u0332 ';
}

const digitSets = [
  [0x30, 0x39], [0xff10, 0xff19], [0x0660, 0x0669], [0x06f0, 0x06f9], [0x0966, 0x096f], [0x09e6, 0x09ef],
  [0x0e50, 0x0e59], [0x1d7ce, 0x1d7d7], [0x1d7ec, 0x1d7f5], [0x2080, 0x2089], [0x1040, 0x1049], [0x0ce6, 0x0cef],
];
const superscripts = '⁰¹²³⁴⁵⁶⁷⁸⁹';
const numberish = ['½', '¾', '⅓', '⅞', 'Ⅻ', 'ⅷ', '①', '⑳', '㉑', '⓪', '〇', '一二三', '十', '万', '億', '𝟘𝟙', '٫', '٬', '·'];

export function digits(rng, n, set = rng.pick(digitSets)) {
  return repeat(n, () => fromRange(rng, set[0], set[1]));
}

export function numberText(rng) {
  const kind = rng.int(10);
  if (kind === 0) return digits(rng, rng.logUniform(1, 400), digitSets[0]);
  if (kind === 1) return (rng.chance(0.3) ? '-' : '') + digits(rng, rng.range(1, 12), digitSets[0]) + '.' + digits(rng, rng.range(1, 20), digitSets[0]) + (rng.chance(0.3) ? 'e' + rng.pick(['+', '-', '']) + rng.range(0, 308) : '');
  if (kind === 2) return digits(rng, rng.range(1, 40));
  if (kind === 3) return repeat(rng.range(1, 20), () => superscripts[rng.int(10)]);
  if (kind === 4) return repeat(rng.range(1, 8), () => digits(rng, rng.range(1, 6)) + rng.pick([' ', ',', '.', '', '/', ':', '-', rng.pick(numberish)]));
  if (kind === 5) return `${rng.range(1900, 2099)}-${String(rng.range(1, 12)).padStart(2, '0')}-${String(rng.range(1, 28)).padStart(2, '0')}T${rng.range(0, 23)}:${rng.range(10, 59)}:${rng.range(10, 59)}.${rng.range(0, 999999)}Z`;
  if (kind === 6) return rng.pick(['$', '€', '¥', '₹', '£', '']) + Number(rng.range(0, 9999999)).toLocaleString('en-US') + rng.pick(['', '.99', ' USD', '%', 'k', 'kg', '㎏', '℃']);
  if (kind === 7) return `0x${rng.range(0, 0x7fffffff).toString(16)} ${rng.range(0, 255)}.${rng.range(0, 255)}.${rng.range(0, 255)}.${rng.range(0, 255)} +${rng.range(1, 99)} ${rng.range(100, 999)}-${rng.range(1000, 9999)}`;
  if (kind === 8) return englishWord(rng) + digits(rng, rng.range(1, 9), digitSets[0]) + englishWord(rng) + digits(rng, rng.range(1, 5)) + rng.pick(numberish);
  return repeat(rng.range(1, 12), () => rng.pick(numberish) + (rng.chance(0.5) ? digits(rng, rng.range(1, 4)) : ''));
}

const unusualSpaces = ['\u00a0', '\u1680', '\u2000', '\u2001', '\u2002', '\u2003', '\u2004', '\u2005', '\u2006', '\u2007',
  '\u2008', '\u2009', '\u200a', '\u200b', '\u200c', '\u200d', '\u2028', '\u2029', '\u202f', '\u205f', '\u3000', '\u0085',
  '\u180e', '\ufeff', '\u000b', '\u000c', '\u001c', '\u001f'];
const plainSpaces = [' ', ' ', ' ', '\t', '\n', '\r\n', '\r', '\n\n'];

export function whitespaceText(rng) {
  const n = rng.range(1, 8);
  let out = rng.chance(0.3) ? '' : englishWord(rng);
  for (let i = 0; i < n; i++) {
    const run = repeat(rng.logUniform(1, 24), () => (rng.chance(0.7) ? rng.pick(plainSpaces) : rng.pick(unusualSpaces)));
    out += run + (rng.chance(0.8) ? rng.pick([englishWord(rng), '中文', 'x', '1', '.', '!', '😀', 'é']) : '');
  }
  return out;
}

const asciiPunct = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
const unicodePunct = '“”‘’«»‹›–—…‽¿¡、。「」『』【】・〜！？，。；：（）§¶©®™°±×÷∞≈≠≤≥√∑∏∫€£¥₹₿←↑→↓■□▲△★☆♠♣♥♦│┌┐└┘├┤─═║╔╗‰′″‴※⁂〃〈〉《》';
export function punctuationText(rng) {
  const n = rng.logUniform(1, 60);
  let out = '';
  for (let i = 0; i < n; i++) {
    const r = rng.int(10);
    if (r < 5) out += asciiPunct[rng.int(asciiPunct.length)];
    else if (r < 8) out += [...unicodePunct][rng.int([...unicodePunct].length)];
    else if (r < 9) out += rng.pick(['a', 'Z', 'it', 'x1', 'é']);
    else out += rng.pick([' ', '\n', '  ', '\t']);
  }
  return out;
}

function jsonValue(rng, depth) {
  const r = rng.int(depth > 3 ? 4 : 7);
  if (r === 0) return rng.range(-1000000, 1000000) / (rng.chance(0.5) ? 1 : 100);
  if (r === 1) return rng.pick([true, false, null]);
  if (r <= 3) return rng.pick([englishWord(rng), 'héllo wörld', '你好', 'emoji 😀', 'line\nbreak', 'tab\there', 'quote "x"', '']);
  if (r === 4) return Array.from({ length: rng.range(0, 4) }, () => jsonValue(rng, depth + 1));
  const o = {};
  for (let i = rng.range(0, 5); i > 0; i--) o[englishWord(rng) + '_' + rng.int(100)] = jsonValue(rng, depth + 1);
  return o;
}

export function structuredText(rng) {
  const kind = rng.int(5);
  if (kind === 0) {
    const host = rng.pick(['example.com', 'www.debian.org', 'github.com', 'xn--bcher-kva.example', 'bücher.example', '127.0.0.1:8080', '[::1]:443']);
    const p = repeat(rng.range(0, 4), () => '/' + rng.pick([englishWord(rng), 'v1', 'index.html', '%E4%BD%A0%E5%A5%BD', '~user', 'a-b_c.d']));
    const q = rng.chance(0.5) ? '?' + repeat(rng.range(1, 3), () => `${englishWord(rng)}=${rng.range(0, 999)}&`) + 'utm_source=x#frag' : '';
    return `${rng.pick(['https', 'http', 'ftp', 'file', 'ws'])}://${host}${p}${q}`;
  }
  if (kind === 1) return JSON.stringify(jsonValue(rng, 0), null, rng.pick([0, 2, '\t']));
  if (kind === 2) {
    const cells = () => '| ' + repeat(rng.range(2, 4), () => rng.pick([englishWord(rng), String(rng.range(0, 999)), '`code`', '**bold**']) + ' | ');
    return `## ${englishWord(rng)} ${englishWord(rng)}\n\n${cells()}\n|---|---|\n${cells()}\n\n- item *one*\n- [link](https://example.com/${rng.int(99)})\n\n\`\`\`python\nprint(${rng.int(99)})\n\`\`\`\n`;
  }
  if (kind === 3) return `<div class="${englishWord(rng)}"><a href="/x?a=1&amp;b=2">${englishWord(rng)}</a>&nbsp;&#x4E2D;</div>`;
  return `user${rng.int(999)}@${rng.pick(['example.com', 'mail.example.co.uk'])}, @${englishWord(rng)} #${englishWord(rng)} ${rng.pick(['C:\\Users\\x\\file.txt', '/usr/lib/x86_64-linux-gnu/libc.so.6', '../a/./b'])}`;
}

// Blocks for the random mixed-script strings: assigned, unassigned, private use, astral, controls.
const codePointBlocks = [
  [0x0000, 0x001f], [0x0020, 0x007e], [0x007f, 0x009f], [0x00a0, 0x024f], [0x0250, 0x02ff], [0x0370, 0x03ff],
  [0x0400, 0x052f], [0x0530, 0x058f], [0x0590, 0x05ff], [0x0600, 0x06ff], [0x0700, 0x074f], [0x0780, 0x07bf],
  [0x0900, 0x0dff], [0x0e00, 0x0eff], [0x0f00, 0x0fff], [0x10a0, 0x10ff], [0x1100, 0x11ff], [0x1200, 0x139f],
  [0x13a0, 0x13ff], [0x1400, 0x167f], [0x1780, 0x17ff], [0x1800, 0x18af], [0x1e00, 0x1fff], [0x2000, 0x206f],
  [0x2070, 0x209f], [0x20a0, 0x20cf], [0x2100, 0x214f], [0x2190, 0x23ff], [0x2460, 0x24ff], [0x2500, 0x27bf],
  [0x2800, 0x28ff], [0x2e80, 0x2fdf], [0x2fe0, 0x2fef], [0x3000, 0x303f], [0x3040, 0x30ff], [0x3100, 0x31ff],
  [0x3200, 0x33ff], [0x3400, 0x4dbf], [0x4e00, 0x9fff], [0xa000, 0xa4cf], [0xa640, 0xa6ff], [0xa960, 0xa97f],
  [0xac00, 0xd7a3], [0xd7a4, 0xd7ff], [0xe000, 0xf8ff], [0xf900, 0xfaff], [0xfb00, 0xfdff], [0xfe00, 0xfe6f],
  [0xfe70, 0xfeff], [0xff00, 0xffef], [0xfff0, 0xffff], [0x10000, 0x1007f], [0x10300, 0x1034f], [0x10400, 0x1044f],
  [0x12000, 0x123ff], [0x13000, 0x1342f], [0x16a40, 0x16a6f], [0x1d400, 0x1d7ff], [0x1e800, 0x1e8df],
  [0x1f000, 0x1f0ff], [0x1f100, 0x1f2ff], [0x1f300, 0x1faff], [0x20000, 0x2a6df], [0x2ebf0, 0x2ee5f],
  [0x30000, 0x3134f], [0x3fff0, 0x3ffff], [0xe0000, 0xe007f], [0xe0100, 0xe01ef], [0xf0000, 0xffffd],
  [0x100000, 0x10ffff],
];

export function randomCodePoints(rng) {
  const n = rng.logUniform(1, 120);
  let out = '';
  let block = rng.pick(codePointBlocks);
  for (let i = 0; i < n; i++) {
    if (rng.chance(0.25)) block = rng.pick(codePointBlocks);
    let c = rng.chance(0.05) ? rng.int(0x110000) : rng.range(block[0], block[1]);
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;  // surrogates are not scalar values; keep strings valid
    out += cp(c);
  }
  return out;
}

const cjkRanges = [[0x4e00, 0x9fa5], [0x9fa6, 0x9fff], [0x3400, 0x4dbf], [0x3040, 0x309f], [0x30a0, 0x30ff],
  [0x31f0, 0x31ff], [0xff66, 0xff9f], [0xac00, 0xd7a3], [0x3130, 0x318f], [0xf900, 0xfaff], [0x20000, 0x2a6df],
  [0x3000, 0x303f]];
// Random CJK, biased to the edges of the pre-tokenizer's [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff] class.
export function randomCjk(rng) {
  return repeat(rng.logUniform(1, 80), () => {
    if (rng.chance(0.1)) return rng.pick(['\u4e00', '\u9fa5', '\u9fa6', '\u3040', '\u309f', '\u30a0', '\u30ff', '\u3005', '\u30fc', ' ', '、', 'a', '1']);
    const [lo, hi] = rng.pick(cjkRanges);
    return fromRange(rng, lo, hi);
  });
}

// Word with no spaces: one repeated letter, a cycling word, random letters, digits or one CJK char.
export function longWord(rng, length) {
  const kind = rng.int(5);
  if (kind === 0) return rng.pick(['a', 'z', 'é', '中', 'ж', '😀']).repeat(length);
  if (kind === 1) return 'supercalifragilistic'.repeat(Math.ceil(length / 20)).slice(0, length);
  if (kind === 2) return repeat(length, () => cp(0x61 + rng.int(26)));
  if (kind === 3) return digits(rng, length, digitSets[0]);
  return repeat(length, () => rng.pick(['ab', 'Ab', 'ñ', 'ß', 'x']));
}

// ---------------------------------------------------------------- invalid UTF-8

const invalidPieces = [
  [0x80], [0xbf], [0x80, 0x80], [0xc0, 0xaf], [0xc1, 0xbf], [0xe0, 0x80, 0xaf], [0xf0, 0x80, 0x80, 0xaf],
  [0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf], [0xed, 0xa0, 0xbd, 0xed, 0xb8, 0x80], [0xf4, 0x90, 0x80, 0x80],
  [0xf5], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xfc, 0x84, 0x80, 0x80, 0x80, 0x80], [0xfe], [0xff], [0xff, 0xfe],
  [0xc3], [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xe4, 0xbd], [0xc2, 0x41], [0xe0, 0xa0], [0xf0, 0x90], [0xfe, 0xff],
  [0xef, 0xbb], [0xe9], [0xfc, 0xe8, 0xe0],
];

export function invalidUtf8(rng, validText) {
  const kind = rng.int(6);
  if (kind === 0) return Buffer.from(Array.from({ length: rng.range(1, 6) }, () => rng.pick(invalidPieces)).flat());
  if (kind === 1) return Buffer.from(Array.from({ length: rng.logUniform(1, 64) }, () => rng.int(256)));
  const valid = Buffer.from(validText, 'utf8');
  if (kind === 2 && valid.length > 1) return valid.subarray(0, 1 + rng.int(valid.length - 1));  // truncated
  if (kind === 3) {  // Latin-1 or UTF-16 encodings of the text
    return rng.chance(0.5) ? Buffer.from(validText, 'latin1') : Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(validText, 'utf16le')]);
  }
  const parts = [];  // valid text with invalid pieces spliced in
  let at = 0;
  for (let k = rng.range(1, 4); k > 0; k--) {
    const cut = Math.min(valid.length, at + rng.int(Math.max(1, valid.length - at)));
    parts.push(valid.subarray(at, cut), Buffer.from(rng.pick(invalidPieces)));
    at = cut;
  }
  parts.push(valid.subarray(at));
  return Buffer.concat(parts);
}

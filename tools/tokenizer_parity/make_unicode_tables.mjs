// Derives the Unicode property sets of the Hugging Face `tokenizers` library's regex engine (Oniguruma,
// inside npm `tokenizers` 0.23.2) by asking the library itself, and writes them as C++ range tables:
// src/io/tokenizer/unicode_tables.cpp. deepinfer's PCRE2 has its own (older) Unicode data; splicing
// these ranges into the pre-tokenizer regexes makes \p{..}, \s, \d, \w match exactly what the library
// matches, whatever Unicode version its Oniguruma was built with.
//
// Method: every scalar value 0..0x10FFFF except surrogates (which a JS string cannot carry alone) is
// pre-tokenized, in chunks, by a Split pre-tokenizer with behavior Removed and the property as regex;
// whatever survives did not match, everything else did.
//
// Run: npm ci && node tools/tokenizer_parity/make_unicode_tables.mjs
import { Tokenizer } from 'tokenizers';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const output = path.join(root, 'src/io/tokenizer/unicode_tables.cpp');
const kMax = 0x10ffff;
const isSurrogate = (cp) => cp >= 0xd800 && cp <= 0xdfff;

function splitter(regex) {
  const json = {
    version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: { type: 'Split', pattern: { Regex: regex }, behavior: 'Removed', invert: false },
    post_processor: null, decoder: null,
    model: { type: 'WordLevel', vocab: { '[UNK]': 0 }, unk_token: '[UNK]' },
  };
  return Tokenizer.fromString(JSON.stringify(json)).getPreTokenizer();
}

// The set of scalar values the library's `regex` matches as a single character, as a Uint8Array.
function matchedSet(regex) {
  const pre = splitter(regex);
  const matched = new Uint8Array(kMax + 1);
  const chunk = 0x4000;
  for (let lo = 0; lo <= kMax; lo += chunk) {
    const cps = [];
    for (let cp = lo; cp < Math.min(lo + chunk, kMax + 1); ++cp) if (!isSurrogate(cp)) cps.push(cp);
    if (cps.length === 0) continue;
    for (const cp of cps) matched[cp] = 1;
    for (const [piece] of pre.preTokenizeString(String.fromCodePoint(...cps))) {
      for (const ch of piece) matched[ch.codePointAt(0)] = 0;
    }
  }
  return matched;
}

function toRanges(set) {
  const ranges = [];
  for (let cp = 0; cp <= kMax; ++cp) {
    if (!set[cp]) continue;
    let last = cp;
    while (last + 1 <= kMax && set[last + 1]) ++last;
    ranges.push([cp, last]);
    cp = last;
  }
  return ranges;
}

// Table name, the library regex that defines it, and every Oniguruma spelling that names it (compared
// after lower-casing and dropping ' ', '_', '-', as Oniguruma does).
const properties = [
  ['L', '\\p{L}', ['L', 'Letter']],
  ['LC', '\\p{LC}', ['LC', 'Cased_Letter']],
  ['Lu', '\\p{Lu}', ['Lu', 'Uppercase_Letter']],
  ['Ll', '\\p{Ll}', ['Ll', 'Lowercase_Letter']],
  ['Lt', '\\p{Lt}', ['Lt', 'Titlecase_Letter']],
  ['Lm', '\\p{Lm}', ['Lm', 'Modifier_Letter']],
  ['Lo', '\\p{Lo}', ['Lo', 'Other_Letter']],
  ['M', '\\p{M}', ['M', 'Mark', 'Combining_Mark']],
  ['Mn', '\\p{Mn}', ['Mn', 'Nonspacing_Mark']],
  ['Mc', '\\p{Mc}', ['Mc', 'Spacing_Mark']],
  ['Me', '\\p{Me}', ['Me', 'Enclosing_Mark']],
  ['N', '\\p{N}', ['N', 'Number']],
  ['Nd', '\\p{Nd}', ['Nd', 'Decimal_Number', 'Digit']],
  ['Nl', '\\p{Nl}', ['Nl', 'Letter_Number']],
  ['No', '\\p{No}', ['No', 'Other_Number']],
  ['P', '\\p{P}', ['P', 'Punctuation', 'Punct']],
  ['Pc', '\\p{Pc}', ['Pc', 'Connector_Punctuation']],
  ['Pd', '\\p{Pd}', ['Pd', 'Dash_Punctuation']],
  ['Ps', '\\p{Ps}', ['Ps', 'Open_Punctuation']],
  ['Pe', '\\p{Pe}', ['Pe', 'Close_Punctuation']],
  ['Pi', '\\p{Pi}', ['Pi', 'Initial_Punctuation']],
  ['Pf', '\\p{Pf}', ['Pf', 'Final_Punctuation']],
  ['Po', '\\p{Po}', ['Po', 'Other_Punctuation']],
  ['S', '\\p{S}', ['S', 'Symbol']],
  ['Sm', '\\p{Sm}', ['Sm', 'Math_Symbol']],
  ['Sc', '\\p{Sc}', ['Sc', 'Currency_Symbol']],
  ['Sk', '\\p{Sk}', ['Sk', 'Modifier_Symbol']],
  ['So', '\\p{So}', ['So', 'Other_Symbol']],
  ['Z', '\\p{Z}', ['Z', 'Separator']],
  ['Zs', '\\p{Zs}', ['Zs', 'Space_Separator']],
  ['Zl', '\\p{Zl}', ['Zl', 'Line_Separator']],
  ['Zp', '\\p{Zp}', ['Zp', 'Paragraph_Separator']],
  ['C', '\\p{C}', ['C', 'Other']],
  ['Cc', '\\p{Cc}', ['Cc', 'Control', 'Cntrl']],
  ['Cf', '\\p{Cf}', ['Cf', 'Format']],
  ['Co', '\\p{Co}', ['Co', 'Private_Use']],
  ['Cn', '\\p{Cn}', ['Cn', 'Unassigned']],
  ['Alphabetic', '\\p{Alphabetic}', ['Alphabetic', 'Alpha']],
  ['White_Space', '\\p{White_Space}', ['White_Space', 'WSpace', 'Space']],
  // The escapes, which deepinfer's regex layer looks up by these names.
  ['escape_s', '\\s', []],
  ['escape_d', '\\d', []],
  ['escape_w', '\\w', []],
];

const normalize = (name) => name.toLowerCase().replace(/[ _-]/g, '');
const tables = new Map();
for (const [name, regex] of properties) {
  tables.set(name, matchedSet(regex));
  process.stderr.write(`${name} `);
}
process.stderr.write('\n');
// Each alias must name exactly the same set in the library (Oniguruma's POSIX-style names such as
// Punct need not equal a general category); one that does not is dropped, so it falls back to PCRE2.
for (const entry of properties) {
  const [name, , aliases] = entry;
  entry[2] = aliases.filter((alias) => {
    if (alias === name) return true;
    const set = matchedSet(`\\p{${alias}}`);
    const same = set.every((v, cp) => v === tables.get(name)[cp]);
    if (!same) process.stderr.write(`alias ${alias} is not ${name} in the library; left out\n`);
    return same;
  });
}

// Checks on characters whose classes are known, so a broken derivation cannot go unnoticed.
const expect = (table, cp, want) => {
  const got = tables.get(table)[cp] === 1;
  if (got !== want) throw new Error(`derivation check failed: U+${cp.toString(16)} in ${table} is ${got}`);
};
expect('Lu', 0x41, true); expect('Lu', 0x61, false); expect('Ll', 0x61, true); expect('L', 0x4e00, true);
expect('Nd', 0x30, true); expect('Nd', 0x661, true); expect('No', 0xb2, true); expect('N', 0x41, false);
expect('P', 0x21, true); expect('S', 0x24, true); expect('S', 0x1f600, true); expect('M', 0x301, true);
expect('escape_s', 0x20, true); expect('escape_s', 0x09, true); expect('escape_s', 0x3000, true);
expect('escape_s', 0x85, true); expect('escape_s', 0x180e, false); expect('escape_s', 0x200b, false);
expect('escape_d', 0x39, true); expect('escape_w', 0x5f, true); expect('escape_w', 0x2d, false);
expect('Cc', 0x00, true); expect('Cf', 0x200d, true); expect('Co', 0xe000, true); expect('Cn', 0x378, true);
for (const [name] of properties.slice(0, 37)) {
  // General-category sets partition the scalar values: each is the union of its subcategories.
  if (name.length !== 1) continue;
  const union = new Uint8Array(kMax + 1);
  for (const [sub] of properties) {
    if (sub.length === 2 && sub[0] === name && sub !== 'LC') tables.get(sub).forEach((v, i) => { if (v) union[i] = 1; });
  }
  for (let cp = 0; cp <= kMax; ++cp) {
    if (!isSurrogate(cp) && union[cp] !== tables.get(name)[cp]) {
      throw new Error(`\\p{${name}} is not the union of its subcategories at U+${cp.toString(16)}`);
    }
  }
}

// The newest Unicode version whose sample characters are all assigned (not Cn) in the library.
const versionSamples = [
  ['14.0', [0x1fae0, 0x1f6dd, 0x1e290]], // melting face, wheel, Toto letter
  ['15.0', [0x1fabc, 0x1fa87, 0x1fada, 0x11f00]], // jellyfish, maracas, ginger root, Kawi
  ['15.1', [0x2ebf0, 0x2ffc, 0x31ef]], // CJK Extension I, ideographic description characters
  ['16.0', [0x1fac6, 0x10d40, 0x1cc00, 0x105c0]], // fingerprint, Garay, legacy computing, Todhri
  ['17.0', [0x1fac8, 0x10940, 0x16ea0, 0x323b0]], // hairy creature, Sidetic, Beria Erfe, CJK Ext J
];
let version = 'older than 14.0';
for (const [name, samples] of versionSamples) {
  if (samples.every((cp) => !tables.get('Cn')[cp])) version = name;
  else break;
}

const hex = (cp) => `0x${cp.toString(16).toUpperCase().padStart(4, '0')}`;
let cpp = `// GENERATED by tools/tokenizer_parity/make_unicode_tables.mjs; do not edit.
// Regenerate: npm ci && node tools/tokenizer_parity/make_unicode_tables.mjs
// Source: the Oniguruma regex engine inside npm \`tokenizers\` 0.23.2, queried code point by code point.
// Inferred Unicode version of that engine: ${version} (newest version whose sample characters are assigned).
// Surrogates (U+D800..U+DFFF) are in no table: they never occur in UTF-8 text.
#include "io/tokenizer/unicode_tables.h"

namespace deepinfer::tokenizer::unicode {
namespace {

`;
const ident = (name) => `k${name.replace(/(^|_)([a-z])/g, (_, __, c) => c.toUpperCase()).replace(/_/g, '')}Ranges`;
for (const [name, regex] of properties) {
  const ranges = toRanges(tables.get(name));
  cpp += `// ${regex}: ${ranges.length} ranges\nconstexpr CodePointRange ${ident(name)}[] = {`;
  ranges.forEach(([a, b], i) => { cpp += `${i % 6 === 0 ? '\n   ' : ''} {${hex(a)}, ${hex(b)}},`; });
  cpp += '\n};\n\n';
}
cpp += `struct NamedTable {
  std::string_view normalized_name;
  std::span<const CodePointRange> ranges;
};

constexpr NamedTable kNamedTables[] = {
`;
for (const [name, , aliases] of properties) {
  for (const alias of aliases) cpp += `    {"${normalize(alias)}", ${ident(name)}},\n`;
}
cpp += `};

}  // namespace

const char kUnicodeVersion[] = "${version}";

std::span<const CodePointRange> white_space_escape() { return ${ident('escape_s')}; }
std::span<const CodePointRange> digit_escape() { return ${ident('escape_d')}; }
std::span<const CodePointRange> word_escape() { return ${ident('escape_w')}; }

std::optional<std::span<const CodePointRange>> property_ranges(std::string_view normalized_name) {
  for (const NamedTable& table : kNamedTables) {
    if (table.normalized_name == normalized_name) return table.ranges;
  }
  return std::nullopt;
}

}  // namespace deepinfer::tokenizer::unicode
`;
writeFileSync(output, cpp);
console.log(`wrote ${path.relative(root, output)} (Unicode ${version})`);

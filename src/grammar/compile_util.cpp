#include "grammar/compile_util.h"

#include <algorithm>

namespace deepinfer::grammar {

CompileTimeout::CompileTimeout(std::chrono::milliseconds bound)
    : Error(str_cat("compiling the constraint took longer than the limit of ", bound.count(), " ms")), bound_(bound) {}

}  // namespace deepinfer::grammar

namespace deepinfer::grammar::detail {

std::string at_byte(std::size_t offset) { return "at byte " + std::to_string(offset); }

void refuse(std::size_t offset, const std::string& reason) { throw CompileError(at_byte(offset), reason); }

// ---- CodeSet ---------------------------------------------------------------------------------

namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

}  // namespace

CodeSet CodeSet::range(uint32_t lo, uint32_t hi) {
  CodeSet set;
  set.add_range(lo, hi);
  return set;
}

CodeSet CodeSet::any() { return range(0, kMaxCodePoint); }

void CodeSet::add_range(uint32_t lo, uint32_t hi) {
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return;
  // Surrogates are not scalar values: no UTF-8 encodes them.
  if (lo <= kSurrogateHi && hi >= kSurrogateLo) {
    if (lo < kSurrogateLo) add_range(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) add_range(kSurrogateHi + 1, hi);
    return;
  }
  // Merge with every range that overlaps or touches [lo, hi].
  auto first = std::lower_bound(ranges_.begin(), ranges_.end(), lo,
                                [](const Range& r, uint32_t v) { return r.hi + 1 < v; });
  auto last = first;
  while (last != ranges_.end() && last->lo <= hi + 1) {
    lo = std::min(lo, last->lo);
    hi = std::max(hi, last->hi);
    ++last;
  }
  first = ranges_.erase(first, last);
  ranges_.insert(first, Range{lo, hi});
}

void CodeSet::add(const CodeSet& other) {
  for (const Range& r : other.ranges_) add_range(r.lo, r.hi);
}

CodeSet CodeSet::complement() const {
  CodeSet out;
  uint32_t next = 0;
  for (const Range& r : ranges_) {
    if (r.lo > next) out.add_range(next, r.lo - 1);
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.add_range(next, kMaxCodePoint);
  return out;
}

bool CodeSet::contains(uint32_t cp) const {
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), cp, [](const Range& r, uint32_t v) { return r.hi < v; });
  return it != ranges_.end() && it->lo <= cp;
}

CodeSet digit_set() { return CodeSet::range('0', '9'); }

CodeSet word_set() {
  CodeSet set = CodeSet::range('a', 'z');
  set.add_range('A', 'Z');
  set.add_range('0', '9');
  set.add('_');
  return set;
}

CodeSet space_set() {
  CodeSet set = CodeSet::range('\t', '\r');  // \t \n \v \f \r
  for (uint32_t cp : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) set.add(cp);
  set.add_range(0x2000, 0x200A);
  return set;
}

// ---- UTF-8 -----------------------------------------------------------------------------------

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool decode_utf8(std::string_view text, std::size_t& pos, uint32_t& cp) {
  if (pos >= text.size()) return false;
  const auto at = [&](std::size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = at(pos);
  if (b0 < 0x80) {
    cp = b0;
    ++pos;
    return true;
  }
  std::size_t length;
  uint32_t value, min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2, value = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3, value = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4, value = b0 & 0x07, min = 0x10000;
  } else {
    return false;
  }
  if (pos + length > text.size()) return false;
  for (std::size_t i = 1; i < length; ++i) {
    const uint8_t b = at(pos + i);
    if ((b & 0xC0) != 0x80) return false;
    value = (value << 6) | (b & 0x3F);
  }
  if (value < min || value > kMaxCodePoint || (value >= kSurrogateLo && value <= kSurrogateHi)) return false;
  cp = value;
  pos += length;
  return true;
}

namespace {

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// The classic split: first by encoded length, then until every byte position of [lo, hi] ranges
// independently of the others (each continuation byte spans 80-BF except at the ends).
void split_utf8(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  static constexpr uint32_t kLast[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t last : kLast) {
    if (lo <= last && hi > last) {
      split_utf8(lo, last, out);
      split_utf8(last + 1, hi, out);
      return;
    }
  }
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_utf8(lo, lo | m, out);
        split_utf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_utf8(lo, (hi & ~m) - 1, out);
        split_utf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  ByteRanges seq;
  for (std::size_t i = 0; i < a.size(); ++i)
    seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<ByteRanges> utf8_sequences(const CodeSet& set) {
  std::vector<ByteRanges> out;
  for (const CodeSet::Range& r : set.ranges()) split_utf8(r.lo, r.hi, out);
  return out;
}

// ---- escapes ---------------------------------------------------------------------------------

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Exactly `count` hex digits at text[pos]; -1 when they are not there.
int64_t hex_digits(std::string_view text, std::size_t pos, std::size_t count) {
  if (pos + count > text.size()) return -1;
  int64_t value = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const int digit = hex_value(text[pos + i]);
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

bool ascii_punctuation(char c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

}  // namespace

bool parse_char_escape(std::string_view text, std::size_t& pos, uint32_t& cp, std::size_t base,
                       const EscapeOptions& options) {
  if (pos >= text.size()) return false;
  const std::size_t backslash = base + pos - 1;
  const char c = text[pos];
  switch (c) {
    case 'n': cp = '\n'; ++pos; return true;
    case 'r': cp = '\r'; ++pos; return true;
    case 't': cp = '\t'; ++pos; return true;
    case 'f': cp = '\f'; ++pos; return true;
    case 'v': cp = '\v'; ++pos; return true;
    default: break;
  }
  if (c == '0' && options.nul) {
    if (pos + 1 < text.size() && text[pos + 1] >= '0' && text[pos + 1] <= '9')
      refuse(backslash, "octal escapes are not supported");
    cp = 0;
    ++pos;
    return true;
  }
  if (c == 'x') {
    const int64_t value = hex_digits(text, pos + 1, 2);
    if (value < 0) refuse(backslash, "\\x needs two hex digits");
    cp = static_cast<uint32_t>(value);
    pos += 3;
    return true;
  }
  if (c == 'U' && options.long_u) {
    const int64_t value = hex_digits(text, pos + 1, 8);
    if (value < 0) refuse(backslash, "\\U needs eight hex digits");
    if (value > kMaxCodePoint || (value >= kSurrogateLo && value <= kSurrogateHi))
      refuse(backslash, "\\U names no Unicode scalar value");
    cp = static_cast<uint32_t>(value);
    pos += 9;
    return true;
  }
  if (c == 'u') {
    if (options.braced_u && pos + 1 < text.size() && text[pos + 1] == '{') {
      std::size_t i = pos + 2;
      int64_t value = 0;
      std::size_t digits = 0;
      while (i < text.size() && hex_value(text[i]) >= 0) {
        value = value * 16 + hex_value(text[i]);
        if (value > kMaxCodePoint) refuse(backslash, "\\u{...} above U+10FFFF");
        ++i, ++digits;
      }
      if (digits == 0 || i >= text.size() || text[i] != '}') refuse(backslash, "malformed \\u{...} escape");
      if (value >= kSurrogateLo && value <= kSurrogateHi)
        refuse(backslash, "a lone surrogate cannot be matched in UTF-8");
      cp = static_cast<uint32_t>(value);
      pos = i + 1;
      return true;
    }
    const int64_t value = hex_digits(text, pos + 1, 4);
    if (value < 0) refuse(backslash, "\\u needs four hex digits");
    if (value >= 0xD800 && value <= 0xDBFF) {
      // A high surrogate: one code point with the \uDC00-\uDFFF after it.
      const int64_t low = pos + 6 < text.size() && text[pos + 5] == '\\' && text[pos + 6] == 'u'
                              ? hex_digits(text, pos + 7, 4)
                              : -1;
      if (low < 0xDC00 || low > 0xDFFF) refuse(backslash, "a lone surrogate cannot be matched in UTF-8");
      cp = static_cast<uint32_t>(0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00));
      pos += 11;
      return true;
    }
    if (value >= 0xDC00 && value <= 0xDFFF) refuse(backslash, "a lone surrogate cannot be matched in UTF-8");
    cp = static_cast<uint32_t>(value);
    pos += 5;
    return true;
  }
  if (ascii_punctuation(c)) {
    cp = static_cast<uint8_t>(c);
    ++pos;
    return true;
  }
  return false;
}

std::size_t skip_space(std::string_view text, std::size_t pos, bool newlines, std::string_view comment1,
                       std::string_view comment2) {
  while (pos < text.size()) {
    const char c = text[pos];
    if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
      ++pos;
    } else if ((!comment1.empty() && text.substr(pos).starts_with(comment1)) ||
               (!comment2.empty() && text.substr(pos).starts_with(comment2))) {
      while (pos < text.size() && text[pos] != '\n' && text[pos] != '\r') ++pos;
    } else {
      break;
    }
  }
  return pos;
}

// ---- Builder ---------------------------------------------------------------------------------

Builder::Builder(Grammar& grammar, const CompileLimits& limits)
    : grammar_(grammar), limits_(limits), byte_terminals_(256, -1) {}

void Builder::alt(RuleId rule, Sequence symbols, std::size_t where) {
  check_room(static_cast<int64_t>(symbols.size()) + 1, where);
  grammar_.add_alternative(rule, std::move(symbols));
}

void Builder::check_room(int64_t pending, std::size_t where) const {
  limits_.check_deadline();
  if (grammar_.size() + pending > limits_.max_symbols)
    refuse(where, str_cat("grammar too large: more than ", limits_.max_symbols, " symbols"));
  if (grammar_.bytes() + pending * static_cast<int64_t>(sizeof(Symbol)) > limits_.max_bytes)
    refuse(where, str_cat("grammar too large: more than ", limits_.max_bytes, " bytes"));
}

Symbol Builder::byte(uint8_t b) {
  int32_t& index = byte_terminals_[b];
  if (index < 0) index = grammar_.terminal(ByteSet::of(b)).index;
  return {false, index};
}

Sequence Builder::literal(std::string_view text) {
  Sequence out;
  out.reserve(text.size());
  for (char c : text) out.push_back(byte(static_cast<uint8_t>(c)));
  return out;
}

Sequence Builder::code_set(const CodeSet& set, std::size_t where) {
  if (set.empty()) return {nothing()};
  if (set.ascii_only()) {
    ByteSet bytes;
    for (const CodeSet::Range& r : set.ranges()) bytes.add_range(static_cast<uint8_t>(r.lo), static_cast<uint8_t>(r.hi));
    return {grammar_.terminal(bytes)};
  }
  auto found = code_sets_.find(set.ranges());
  if (found != code_sets_.end()) return {found->second};
  const RuleId rule = grammar_.add_rule("char");
  ByteSet single;
  std::vector<Sequence> multi;
  for (const ByteRanges& ranges : utf8_sequences(set)) {
    if (ranges.size() == 1) {
      single.add_range(ranges[0].first, ranges[0].second);
      continue;
    }
    Sequence seq;
    for (const auto& [lo, hi] : ranges) seq.push_back(grammar_.terminal(ByteSet::range(lo, hi)));
    multi.push_back(std::move(seq));
  }
  if (!single.empty()) alt(rule, {grammar_.terminal(single)}, where);
  for (Sequence& seq : multi) alt(rule, std::move(seq), where);
  const Symbol symbol = Grammar::rule(rule);
  code_sets_.emplace(set.ranges(), symbol);
  return {symbol};
}

Symbol Builder::as_symbol(Sequence sequence, std::size_t where, const char* name) {
  if (sequence.size() == 1) return sequence[0];
  const RuleId rule = grammar_.add_rule(name);
  alt(rule, std::move(sequence), where);
  return Grammar::rule(rule);
}

void Builder::check_repeat(int64_t min, int64_t max, std::size_t where) const {
  if (min > limits_.max_repeat || max > limits_.max_repeat)
    refuse(where, str_cat("repetition count ", std::max(min, max), " above the limit ", limits_.max_repeat));
  if (max >= 0 && min > max) refuse(where, str_cat("repetition {", min, ",", max, "}: minimum above maximum"));
}

Sequence Builder::repeat(Sequence item, int64_t min, int64_t max, std::size_t where) {
  check_repeat(min, max, where);
  if (item.empty() || max == 0) return {};
  if (min == 1 && max == 1) return item;
  const Symbol x = as_symbol(std::move(item), where, "item");
  const int64_t optional = max < 0 ? 0 : max - min;
  check_room(min + 4 * optional + (max < 0 ? 5 : 1), where);
  Sequence out(static_cast<std::size_t>(min), x);
  if (max < 0) {
    const auto key = std::make_pair(x.is_rule ? 1 : 0, x.index);
    auto found = stars_.find(key);
    if (found == stars_.end()) {
      // Left recursive (star -> star x | ε): Earley keeps one item at the repetition's start for
      // the whole run, where right recursion adds a waiting item per copy (each to complete at the
      // end); so the chart inside a long string stays the same from byte to byte, and its masks
      // are cache hits (matcher.cpp mask_key).
      const RuleId star = grammar_.add_rule("star");
      alt(star, {Grammar::rule(star), x}, where);
      alt(star, {}, where);
      found = stars_.emplace(key, Grammar::rule(star)).first;
    }
    out.push_back(found->second);
  } else if (optional > 0) {
    // O1 -> x | ε, Ok -> x O(k-1) | ε: up to `optional` more copies.
    Symbol tail{};
    for (int64_t k = 1; k <= optional; ++k) {
      const RuleId rule = grammar_.add_rule("opt");
      alt(rule, k == 1 ? Sequence{x} : Sequence{x, tail}, where);
      alt(rule, {}, where);
      tail = Grammar::rule(rule);
    }
    out.push_back(tail);
  }
  // Long expansions become a rule, so no caller ever holds more than a few pending symbols
  // per source byte.
  if (out.size() > 16) return {as_symbol(std::move(out), where, "repeat")};
  return out;
}

Sequence Builder::choice(std::vector<Sequence> alternatives, std::size_t where, const char* name) {
  if (alternatives.size() == 1) return std::move(alternatives[0]);
  const RuleId rule = grammar_.add_rule(name);
  for (Sequence& seq : alternatives) alt(rule, std::move(seq), where);
  if (alternatives.empty()) alt(rule, {nothing()}, where);
  return {Grammar::rule(rule)};
}

RuleId Builder::import(const Grammar& other, std::size_t where) {
  check_room(other.size(), where);
  return grammar_.include(other);
}

}  // namespace deepinfer::grammar::detail

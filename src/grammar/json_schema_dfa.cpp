// Regular expressions to automata, the operations on automata the schema compiler needs, and
// automata to grammar rules (json_schema_dfa.h).
//
// Patterns are read as ECMAScript (the JSON Schema spec) and Python's `re` (what the common
// validators run) read them. Where the two differ, the narrow reading (the default) takes what
// both accept, so a grammar never accepts a string one of them rejects; the wide reading takes
// what either accepts (what a negated pattern must exclude):
//   \d \w \s: narrow [0-9], [A-Za-z0-9_], whitespace both call whitespace; wide: everything
//     Python's Unicode classes may include (\d: ASCII and all from U+0660 up, \w: ASCII word
//     characters and all non-ASCII);
//   \D \W \S and negated classes: the complement of the other reading's set;
//   `.`: narrow anything but \n \r U+2028 U+2029, wide anything but \n;
//   `$`: narrow the end; wide also before a final \n (Python).
// Characters are code points (Python's and the Rust validator's unit), not UTF-16 units.
// Refused: backreferences, lookaround, \b \B \A \Z, inline flags, possessive quantifiers,
// octal escapes, \p{..}, \cX, \u{..}, a class starting with ']', and {,n}.
#include "grammar/json_schema_dfa.h"

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>

namespace deepinfer::grammar::schema {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// ---- sets of code points ------------------------------------------------------------------

using Range = std::pair<uint32_t, uint32_t>;  // inclusive

// Sorted, disjoint, non-adjacent ranges; never containing a surrogate (U+D800..U+DFFF).
struct CodeSet {
  std::vector<Range> ranges;
};

CodeSet normalize(std::vector<Range> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<Range> merged;
  for (const Range& r : ranges) {
    if (r.first > r.second) continue;
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  CodeSet out;
  for (const Range& r : merged) {
    if (r.second < 0xD800 || r.first > 0xDFFF) {
      out.ranges.push_back(r);
      continue;
    }
    if (r.first < 0xD800) out.ranges.push_back({r.first, 0xD7FF});
    if (r.second > 0xDFFF) out.ranges.push_back({0xE000, r.second});
  }
  return out;
}

CodeSet set_of(std::initializer_list<Range> ranges) { return normalize(std::vector<Range>(ranges)); }

CodeSet complement(const CodeSet& s) {
  std::vector<Range> out;
  uint32_t next = 0;
  for (const Range& r : s.ranges) {
    if (r.first > next) out.push_back({next, r.first - 1});
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return normalize(std::move(out));
}

const CodeSet& any_set() {
  static const CodeSet set = set_of({{0, kMaxCodePoint}});
  return set;
}
const CodeSet& dot_set() {
  static const CodeSet set = complement(set_of({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
  return set;
}
const CodeSet& digit_narrow() {
  static const CodeSet set = set_of({{'0', '9'}});
  return set;
}
const CodeSet& digit_wide() {  // every Unicode decimal digit is ASCII or at or above U+0660
  static const CodeSet set = set_of({{'0', '9'}, {0x660, kMaxCodePoint}});
  return set;
}
const CodeSet& word_narrow() {
  static const CodeSet set = set_of({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
  return set;
}
const CodeSet& word_wide() {
  static const CodeSet set = set_of({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}, {0x80, kMaxCodePoint}});
  return set;
}
const CodeSet& space_narrow() {  // whitespace for both ECMAScript and Python
  static const CodeSet set = set_of({{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                     {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}});
  return set;
}
const CodeSet& space_wide() {  // whitespace for either
  static const CodeSet set =
      set_of({{0x09, 0x0D}, {0x1C, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x180E, 0x180E},
              {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
              {0xFEFF, 0xFEFF}});
  return set;
}

// ---- UTF-8 ---------------------------------------------------------------------------------

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode_utf8(uint32_t cp, uint8_t* out) {
  int n = utf8_length(cp);
  if (n == 1) {
    out[0] = static_cast<uint8_t>(cp);
    return;
  }
  static const uint8_t lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1; i > 0; --i) {
    out[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    cp >>= 6;
  }
  out[0] = static_cast<uint8_t>(lead[n] | cp);
}

using ByteRange = std::pair<uint8_t, uint8_t>;

// The code points lo..hi (no surrogates, one encoding length) as sequences of byte ranges, the
// classic split so that each sequence is a product of ranges.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t b : bounds) {
    if (lo <= b && hi > b) {
      utf8_sequences(lo, b, out);
      utf8_sequences(b + 1, hi, out);
      return;
    }
  }
  int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode_utf8(lo, a);
  encode_utf8(hi, b);
  std::vector<ByteRange> seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out.push_back(std::move(seq));
}

// ---- regex syntax ----------------------------------------------------------------------------

struct Ast {
  enum Kind { kEmpty, kSet, kConcat, kAlt, kRepeat, kBol, kEol };
  Kind kind = kEmpty;
  CodeSet set;
  std::vector<int32_t> kids;
  int64_t min = 0, max = -1;
};

class Parser {
 public:
  // `wide`: every string either dialect matches (for negated patterns) instead of the strings
  // both match.
  Parser(std::string_view pattern, const DfaLimits& limits, bool wide) : p_(pattern), limits_(limits), wide_(wide) {}

  int32_t parse() {
    int32_t root = alternation(0);
    if (pos_ < p_.size()) fail(pos_, "unbalanced ')'");
    return root;
  }
  std::vector<Ast> nodes;

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& why) const {
    throw DfaError(static_cast<int64_t>(at), why);
  }

  int32_t add(Ast node) {
    nodes.push_back(std::move(node));
    return static_cast<int32_t>(nodes.size()) - 1;
  }
  int32_t add_set(CodeSet set) {
    Ast node;
    node.kind = Ast::kSet;
    node.set = std::move(set);
    return add(std::move(node));
  }

  int32_t alternation(int depth) {
    if (depth > limits_.max_depth) fail(pos_, "the pattern nests deeper than max_depth");
    std::vector<int32_t> alts{sequence(depth)};
    while (pos_ < p_.size() && p_[pos_] == '|') {
      ++pos_;
      alts.push_back(sequence(depth));
    }
    if (alts.size() == 1) return alts[0];
    Ast node;
    node.kind = Ast::kAlt;
    node.kids = std::move(alts);
    return add(std::move(node));
  }

  int32_t sequence(int depth) {
    std::vector<int32_t> items;
    while (pos_ < p_.size() && p_[pos_] != '|' && p_[pos_] != ')') {
      int32_t atom = parse_atom(depth);
      items.push_back(quantified(atom));
    }
    if (items.size() == 1) return items[0];
    Ast node;
    node.kind = items.empty() ? Ast::kEmpty : Ast::kConcat;
    node.kids = std::move(items);
    return add(std::move(node));
  }

  // At '{': a quantifier {n}, {n,}, {n,m}? Anything else is a literal brace in both dialects,
  // except {,m}, which Python reads as a quantifier and ECMAScript as text.
  bool brace_quantifier(std::size_t at) const {
    std::size_t i = at + 1;
    if (i < p_.size() && p_[i] == ',') {
      std::size_t j = i + 1;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') ++j;
      if (j > i + 1 && j < p_.size() && p_[j] == '}') fail(at, "{,n} reads differently in ECMAScript and Python");
      return false;
    }
    std::size_t digits = i;
    while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') ++i;
    if (i == digits) return false;
    if (i < p_.size() && p_[i] == '}') return true;
    if (i >= p_.size() || p_[i] != ',') return false;
    ++i;
    while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') ++i;
    return i < p_.size() && p_[i] == '}';
  }

  bool at_quantifier() const {
    if (pos_ >= p_.size()) return false;
    char c = p_[pos_];
    return c == '*' || c == '+' || c == '?' || (c == '{' && brace_quantifier(pos_));
  }

  int64_t number(std::size_t& i) const {
    int64_t value = 0;
    while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
      value = value * 10 + (p_[i] - '0');
      if (value > limits_.max_repeat) fail(i, "a repetition count exceeds max_repeat");
      ++i;
    }
    return value;
  }

  int32_t quantified(int32_t atom) {
    if (!at_quantifier()) return atom;
    std::size_t at = pos_;
    if (nodes[static_cast<std::size_t>(atom)].kind == Ast::kBol || nodes[static_cast<std::size_t>(atom)].kind == Ast::kEol)
      fail(at, "nothing to repeat");
    int64_t min = 0, max = -1;
    char c = p_[pos_];
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      min = 1;
      ++pos_;
    } else if (c == '?') {
      max = 1;
      ++pos_;
    } else {
      std::size_t i = pos_ + 1;
      min = number(i);
      if (p_[i] == '}') {
        max = min;
      } else {
        ++i;  // ','
        if (p_[i] != '}') {
          max = number(i);
          if (max < min) fail(at, "a repetition {n,m} with m < n");
        }
      }
      pos_ = i + 1;
    }
    if (pos_ < p_.size() && p_[pos_] == '?') ++pos_;  // lazy: the same language
    if (pos_ < p_.size() && p_[pos_] == '+') fail(pos_, "possessive quantifiers are not supported");
    if (at_quantifier()) fail(pos_, "multiple repeat");
    Ast node;
    node.kind = Ast::kRepeat;
    node.kids = {atom};
    node.min = min;
    node.max = max;
    return add(std::move(node));
  }

  uint32_t code_point() {
    auto byte = [&](std::size_t i) { return static_cast<uint8_t>(p_[i]); };
    uint8_t b0 = byte(pos_);
    int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + static_cast<std::size_t>(n) > p_.size()) fail(pos_, "the pattern is not valid UTF-8");
    uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int i = 1; i < n; ++i) {
      uint8_t b = byte(pos_ + static_cast<std::size_t>(i));
      if ((b & 0xC0) != 0x80) fail(pos_, "the pattern is not valid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    if (utf8_length(cp) != n || (cp >= 0xD800 && cp <= 0xDFFF) || cp > kMaxCodePoint)
      fail(pos_, "the pattern is not valid UTF-8");
    pos_ += static_cast<std::size_t>(n);
    return cp;
  }

  uint32_t hex(int digits) {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= p_.size()) fail(pos_, "a truncated hex escape");
      char c = p_[pos_];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail(pos_, "a malformed hex escape");
      value = value * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return value;
  }

  // After a backslash. A class escape (\d ...) sets narrow and wide and returns true; a
  // character escape sets cp and returns false.
  bool escape(bool in_class, uint32_t& cp, CodeSet& narrow, CodeSet& wide) {
    std::size_t at = pos_ - 1;
    if (pos_ >= p_.size()) fail(at, "a trailing backslash");
    char c = p_[pos_];
    auto set = [&](const CodeSet& n, const CodeSet& w) {
      ++pos_;
      narrow = n;
      wide = w;
      return true;
    };
    switch (c) {
      case 'd': return set(digit_narrow(), digit_wide());
      case 'D': return set(complement(digit_wide()), complement(digit_narrow()));
      case 'w': return set(word_narrow(), word_wide());
      case 'W': return set(complement(word_wide()), complement(word_narrow()));
      case 's': return set(space_narrow(), space_wide());
      case 'S': return set(complement(space_wide()), complement(space_narrow()));
      case 't': cp = '\t'; ++pos_; return false;
      case 'n': cp = '\n'; ++pos_; return false;
      case 'r': cp = '\r'; ++pos_; return false;
      case 'f': cp = '\f'; ++pos_; return false;
      case 'v': cp = '\v'; ++pos_; return false;
      case '0':
        ++pos_;
        if (pos_ < p_.size() && p_[pos_] >= '0' && p_[pos_] <= '9') fail(at, "octal escapes are not supported");
        cp = 0;
        return false;
      case 'x':
        ++pos_;
        cp = hex(2);
        return false;
      case 'u':
        ++pos_;
        if (pos_ < p_.size() && p_[pos_] == '{') fail(at, "\\u{...} escapes are not supported");
        cp = hex(4);
        if (cp >= 0xD800 && cp <= 0xDFFF) fail(at, "surrogate escapes are not supported");
        return false;
      case 'b':
        if (in_class) {
          cp = '\b';
          ++pos_;
          return false;
        }
        fail(at, "word boundaries (\\b) are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') fail(at, "backreferences are not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
      fail(at, std::string("the escape \\") + c + " is not supported");
    cp = code_point();  // an escaped punctuation or non-ASCII character stands for itself
    return false;
  }

  int32_t parse_class() {
    std::size_t at = pos_;
    ++pos_;  // '['
    bool negated = false;
    if (pos_ < p_.size() && p_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    if (pos_ < p_.size() && p_[pos_] == ']') fail(pos_, "a class starting with ']' reads differently in ECMAScript and Python");
    std::vector<Range> narrow, wide;
    auto append = [](std::vector<Range>& to, const CodeSet& s) { to.insert(to.end(), s.ranges.begin(), s.ranges.end()); };
    while (true) {
      if (pos_ >= p_.size()) fail(at, "a class without ']'");
      if (p_[pos_] == ']') {
        ++pos_;
        break;
      }
      uint32_t lo = 0;
      CodeSet n, w;
      bool is_set = false;
      if (p_[pos_] == '\\') {
        ++pos_;
        is_set = escape(true, lo, n, w);
      } else {
        lo = code_point();
      }
      bool range = pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']';
      if (is_set) {
        if (range) fail(pos_, "a range with a class escape as an end");
        append(narrow, n);
        append(wide, w);
        continue;
      }
      uint32_t hi = lo;
      if (range) {
        ++pos_;
        if (p_[pos_] == '\\') {
          ++pos_;
          if (escape(true, hi, n, w)) fail(pos_, "a range with a class escape as an end");
        } else {
          hi = code_point();
        }
        if (hi < lo) fail(pos_, "a class range out of order");
      }
      narrow.push_back({lo, hi});
      wide.push_back({lo, hi});
    }
    if (wide_) std::swap(narrow, wide);
    return add_set(negated ? complement(normalize(std::move(wide))) : normalize(std::move(narrow)));
  }

  int32_t parse_atom(int depth) {
    std::size_t at = pos_;
    char c = p_[pos_];
    switch (c) {
      case '(': {
        ++pos_;
        if (pos_ < p_.size() && p_[pos_] == '?') {
          if (pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') {
            pos_ += 2;
          } else if ((pos_ + 1 < p_.size() && p_[pos_ + 1] == '<' && pos_ + 2 < p_.size() && p_[pos_ + 2] != '=' &&
                      p_[pos_ + 2] != '!') ||
                     (pos_ + 2 < p_.size() && p_[pos_ + 1] == 'P' && p_[pos_ + 2] == '<')) {
            pos_ = p_.find('>', pos_);  // a named group: the name is no part of the language
            if (pos_ == std::string_view::npos) fail(at, "an unterminated group name");
            ++pos_;
          } else {
            fail(at, "lookaround and inline flags are not supported");
          }
        }
        int32_t inner = alternation(depth + 1);
        if (pos_ >= p_.size() || p_[pos_] != ')') fail(at, "a group without ')'");
        ++pos_;
        return inner;
      }
      case '[': return parse_class();
      case '.': ++pos_; return add_set(wide_ ? complement(set_of({{'\n', '\n'}})) : dot_set());
      case '^': {
        ++pos_;
        Ast node;
        node.kind = Ast::kBol;
        return add(std::move(node));
      }
      case '$': {
        ++pos_;
        Ast node;
        node.kind = Ast::kEol;
        int32_t eol = add(std::move(node));
        if (!wide_) return eol;
        // Python's $ also matches before a newline that ends the string.
        Ast seq;
        seq.kind = Ast::kConcat;
        seq.kids = {add_set(set_of({{'\n', '\n'}})), eol};
        int32_t before_newline = add(std::move(seq));
        Ast alt;
        alt.kind = Ast::kAlt;
        alt.kids = {eol, before_newline};
        return add(std::move(alt));
      }
      case '\\': {
        ++pos_;
        uint32_t cp = 0;
        CodeSet narrow, wide;
        if (escape(false, cp, narrow, wide)) return add_set(wide_ ? std::move(wide) : std::move(narrow));
        return add_set(set_of({{cp, cp}}));
      }
      case '*': case '+': case '?': fail(at, "nothing to repeat");
      case '{':
        if (brace_quantifier(pos_)) fail(at, "nothing to repeat");
        ++pos_;
        return add_set(set_of({{'{', '{'}}));
      default: {
        uint32_t cp = code_point();
        return add_set(set_of({{cp, cp}}));
      }
    }
  }

  std::string_view p_;
  std::size_t pos_ = 0;
  const DfaLimits& limits_;
  bool wide_ = false;
};

// ---- NFA -------------------------------------------------------------------------------------

struct Nfa {
  struct Edge {
    int32_t set;
    int32_t to;
  };
  struct State {
    std::vector<Edge> edges;
    std::vector<int32_t> eps, bol, eol;
  };
  std::vector<State> states;
  std::vector<ByteSet> sets;
  std::map<std::array<uint64_t, 4>, int32_t> set_ids;
  int64_t max_states = 0;

  int32_t add_state() {
    if (static_cast<int64_t>(states.size()) >= max_states) throw DfaError(-1, "the pattern's automaton exceeds its state limit");
    states.emplace_back();
    return static_cast<int32_t>(states.size()) - 1;
  }
  int32_t set_id(const ByteSet& set) {
    auto [it, added] = set_ids.emplace(set.words, static_cast<int32_t>(sets.size()));
    if (added) sets.push_back(set);
    return it->second;
  }
  void byte_edge(int32_t from, const ByteSet& set, int32_t to) {
    states[static_cast<std::size_t>(from)].edges.push_back({set_id(set), to});
  }
};

ByteSet byte_range(uint8_t lo, uint8_t hi) {
  ByteSet set;
  set.add_range(lo, hi);
  return set;
}

// Thompson's construction: the fragment for `node` from state `from`; returns its end state.
int32_t build_nfa(const std::vector<Ast>& ast, int32_t node, int32_t from, Nfa& nfa) {
  const Ast& a = ast[static_cast<std::size_t>(node)];
  switch (a.kind) {
    case Ast::kEmpty: return from;
    case Ast::kSet: {
      int32_t end = nfa.add_state();
      std::vector<std::vector<ByteRange>> seqs;
      for (const Range& r : a.set.ranges) utf8_sequences(r.first, r.second, seqs);
      // Sequences of one length that share their leading ranges share states.
      std::map<std::pair<int32_t, std::pair<uint8_t, uint8_t>>, int32_t> shared;
      for (const auto& seq : seqs) {
        int32_t cur = from;
        for (std::size_t i = 0; i < seq.size(); ++i) {
          if (i + 1 == seq.size()) {
            nfa.byte_edge(cur, byte_range(seq[i].first, seq[i].second), end);
          } else {
            auto key = std::make_pair(cur * 8 + static_cast<int32_t>(seq.size()), seq[i]);
            auto it = shared.find(key);
            if (it == shared.end()) {
              int32_t mid = nfa.add_state();
              nfa.byte_edge(cur, byte_range(seq[i].first, seq[i].second), mid);
              it = shared.emplace(key, mid).first;
            }
            cur = it->second;
          }
        }
      }
      return end;
    }
    case Ast::kConcat: {
      int32_t cur = from;
      for (int32_t kid : a.kids) cur = build_nfa(ast, kid, cur, nfa);
      return cur;
    }
    case Ast::kAlt: {
      int32_t end = nfa.add_state();
      for (int32_t kid : a.kids) {
        int32_t s = nfa.add_state();
        nfa.states[static_cast<std::size_t>(from)].eps.push_back(s);
        int32_t e = build_nfa(ast, kid, s, nfa);
        nfa.states[static_cast<std::size_t>(e)].eps.push_back(end);
      }
      return end;
    }
    case Ast::kRepeat: {
      int32_t cur = from;
      for (int64_t i = 0; i < a.min; ++i) cur = build_nfa(ast, a.kids[0], cur, nfa);
      if (a.max < 0) {
        int32_t loop = nfa.add_state();
        nfa.states[static_cast<std::size_t>(cur)].eps.push_back(loop);
        int32_t e = build_nfa(ast, a.kids[0], loop, nfa);
        nfa.states[static_cast<std::size_t>(e)].eps.push_back(loop);
        return loop;
      }
      for (int64_t i = a.min; i < a.max; ++i) {
        int32_t s = nfa.add_state();
        nfa.states[static_cast<std::size_t>(cur)].eps.push_back(s);
        int32_t e = build_nfa(ast, a.kids[0], s, nfa);
        int32_t end = nfa.add_state();
        nfa.states[static_cast<std::size_t>(cur)].eps.push_back(end);
        nfa.states[static_cast<std::size_t>(e)].eps.push_back(end);
        cur = end;
      }
      return cur;
    }
    case Ast::kBol:
    case Ast::kEol: {
      int32_t s = nfa.add_state();
      auto& edges = a.kind == Ast::kBol ? nfa.states[static_cast<std::size_t>(from)].bol
                                        : nfa.states[static_cast<std::size_t>(from)].eol;
      edges.push_back(s);
      return s;
    }
  }
  return from;
}

// Classes of bytes no set of `sets` tells apart.
int32_t byte_classes(const std::vector<ByteSet>& sets, std::array<int32_t, 256>& cls) {
  std::map<std::vector<bool>, int32_t> ids;
  for (int b = 0; b < 256; ++b) {
    std::vector<bool> sig(sets.size());
    for (std::size_t i = 0; i < sets.size(); ++i) sig[i] = sets[i].contains(static_cast<uint8_t>(b));
    auto [it, added] = ids.emplace(std::move(sig), static_cast<int32_t>(ids.size()));
    cls[static_cast<std::size_t>(b)] = it->second;
  }
  return static_cast<int32_t>(ids.size());
}

// Subset construction with ^ (only before the first byte) and $ (only after the last).
Dfa determinize(const Nfa& nfa, int32_t start, int32_t final_state, const DfaLimits& limits) {
  Dfa dfa;
  dfa.classes = byte_classes(nfa.sets, dfa.cls);
  std::vector<uint8_t> rep(static_cast<std::size_t>(dfa.classes));
  for (int b = 255; b >= 0; --b) rep[static_cast<std::size_t>(dfa.cls[static_cast<std::size_t>(b)])] = static_cast<uint8_t>(b);

  std::vector<uint32_t> seen(nfa.states.size(), 0);
  uint32_t stamp = 0;
  std::vector<int32_t> stack;
  auto closure = [&](std::vector<int32_t> seeds, bool at_start) {
    ++stamp;
    std::vector<int32_t> out;
    stack = std::move(seeds);
    while (!stack.empty()) {
      int32_t s = stack.back();
      stack.pop_back();
      if (seen[static_cast<std::size_t>(s)] == stamp) continue;
      seen[static_cast<std::size_t>(s)] = stamp;
      out.push_back(s);
      const auto& st = nfa.states[static_cast<std::size_t>(s)];
      for (int32_t t : st.eps) stack.push_back(t);
      if (at_start)
        for (int32_t t : st.bol) stack.push_back(t);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  auto accepts_at_end = [&](const std::vector<int32_t>& set, bool at_start) {
    ++stamp;
    stack = set;
    while (!stack.empty()) {
      int32_t s = stack.back();
      stack.pop_back();
      if (s == final_state) return true;
      if (seen[static_cast<std::size_t>(s)] == stamp) continue;
      seen[static_cast<std::size_t>(s)] = stamp;
      const auto& st = nfa.states[static_cast<std::size_t>(s)];
      for (int32_t t : st.eps) stack.push_back(t);
      for (int32_t t : st.eol) stack.push_back(t);
      if (at_start)
        for (int32_t t : st.bol) stack.push_back(t);
    }
    return false;
  };

  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> queue;
  std::vector<int32_t> first = closure({start}, true);
  first.insert(first.begin(), -1);  // the start state: ^ still holds
  ids.emplace(first, 0);
  queue.push_back(first);
  for (std::size_t head = 0; head < queue.size(); ++head) {
    std::vector<int32_t> key = queue[head];
    bool at_start = !key.empty() && key[0] == -1;
    std::vector<int32_t> set(key.begin() + (at_start ? 1 : 0), key.end());
    limits.check_state(dfa.next.size());
    dfa.accepting.push_back(accepts_at_end(set, at_start) ? 1 : 0);
    for (int32_t c = 0; c < dfa.classes; ++c) {
      uint8_t byte = rep[static_cast<std::size_t>(c)];
      std::vector<int32_t> targets;
      for (int32_t s : set)
        for (const auto& e : nfa.states[static_cast<std::size_t>(s)].edges)
          if (nfa.sets[static_cast<std::size_t>(e.set)].contains(byte)) targets.push_back(e.to);
      int32_t target = -1;
      if (!targets.empty()) {
        std::vector<int32_t> next = closure(std::move(targets), false);
        auto [it, added] = ids.emplace(next, static_cast<int32_t>(queue.size()));
        if (added) {
          if (static_cast<int64_t>(queue.size()) >= limits.max_states)
            throw DfaError(-1, "the pattern's automaton exceeds its state limit");
          queue.push_back(std::move(next));
        }
        target = it->second;
      }
      dfa.next.push_back(target);
    }
  }
  return dfa;
}


Dfa product(const Dfa& a, const Dfa& b, bool is_union, const DfaLimits& limits) {
  Dfa out;
  std::map<int32_t, int32_t> joint;
  std::vector<std::pair<int32_t, int32_t>> pair_of;
  for (int byte = 0; byte < 256; ++byte) {
    int32_t key = a.cls[static_cast<std::size_t>(byte)] * b.classes + b.cls[static_cast<std::size_t>(byte)];
    auto [it, added] = joint.emplace(key, static_cast<int32_t>(pair_of.size()));
    if (added) pair_of.push_back({a.cls[static_cast<std::size_t>(byte)], b.cls[static_cast<std::size_t>(byte)]});
    out.cls[static_cast<std::size_t>(byte)] = it->second;
  }
  out.classes = static_cast<int32_t>(pair_of.size());
  std::unordered_map<int64_t, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> queue;
  auto id_of = [&](int32_t sa, int32_t sb) -> int32_t {
    if (is_union ? (sa < 0 && sb < 0) : (sa < 0 || sb < 0)) return -1;
    int64_t key = (int64_t{sa} + 1) * (int64_t{b.states()} + 1) + (sb + 1);
    auto [it, added] = ids.emplace(key, static_cast<int32_t>(queue.size()));
    if (added) {
      if (static_cast<int64_t>(queue.size()) >= limits.max_states) throw DfaError(-1, "an automaton exceeds its state limit");
      queue.push_back({sa, sb});
    }
    return it->second;
  };
  out.start = id_of(a.start, b.start);
  if (out.start < 0) return Dfa::nothing();
  for (std::size_t head = 0; head < queue.size(); ++head) {
    limits.check_state(out.next.size());
    auto [sa, sb] = queue[head];
    bool acc_a = sa >= 0 && a.accepting[static_cast<std::size_t>(sa)];
    bool acc_b = sb >= 0 && b.accepting[static_cast<std::size_t>(sb)];
    out.accepting.push_back(is_union ? (acc_a || acc_b) : (acc_a && acc_b));
    for (const auto& [ca, cb] : pair_of) {
      int32_t na = sa >= 0 ? a.next[static_cast<std::size_t>(sa) * static_cast<std::size_t>(a.classes) + static_cast<std::size_t>(ca)] : -1;
      int32_t nb = sb >= 0 ? b.next[static_cast<std::size_t>(sb) * static_cast<std::size_t>(b.classes) + static_cast<std::size_t>(cb)] : -1;
      out.next.push_back(id_of(na, nb));
    }
  }
  return out;
}

}  // namespace

bool Dfa::matches(std::string_view text) const {
  int32_t s = start;
  for (char c : text) {
    if (s < 0) return false;
    s = step(s, static_cast<uint8_t>(c));
  }
  return s >= 0 && accepting[static_cast<std::size_t>(s)];
}

bool Dfa::empty() const {
  if (start < 0 || start >= states()) return true;
  std::vector<uint8_t> seen(static_cast<std::size_t>(states()), 0);
  std::vector<int32_t> stack{start};
  seen[static_cast<std::size_t>(start)] = 1;
  while (!stack.empty()) {
    int32_t s = stack.back();
    stack.pop_back();
    if (accepting[static_cast<std::size_t>(s)]) return false;
    for (int32_t c = 0; c < classes; ++c) {
      int32_t t = next[static_cast<std::size_t>(s) * static_cast<std::size_t>(classes) + static_cast<std::size_t>(c)];
      if (t >= 0 && !seen[static_cast<std::size_t>(t)]) {
        seen[static_cast<std::size_t>(t)] = 1;
        stack.push_back(t);
      }
    }
  }
  return true;
}

Dfa Dfa::nothing() {
  Dfa dfa;
  dfa.classes = 1;
  dfa.next = {-1};
  dfa.accepting = {0};
  return dfa;
}

Dfa regex_dfa(std::string_view pattern, bool search, const DfaLimits& limits, bool wide) {
  Parser parser(pattern, limits, wide);
  int32_t root = parser.parse();
  std::vector<Ast> ast = std::move(parser.nodes);
  if (search) {  // .* R .* over any code point
    Ast any;
    any.kind = Ast::kSet;
    any.set = any_set();
    ast.push_back(any);
    Ast star;
    star.kind = Ast::kRepeat;
    star.kids = {static_cast<int32_t>(ast.size()) - 1};
    ast.push_back(star);
    int32_t star_id = static_cast<int32_t>(ast.size()) - 1;
    Ast seq;
    seq.kind = Ast::kConcat;
    seq.kids = {star_id, root, star_id};
    ast.push_back(seq);
    root = static_cast<int32_t>(ast.size()) - 1;
  }
  Nfa nfa;
  nfa.max_states = limits.max_states * 4;
  int32_t start = nfa.add_state();
  int32_t final_state = build_nfa(ast, root, start, nfa);
  return minimize(determinize(nfa, start, final_state, limits));
}

// UTF-8 structure in 12 byte classes and 8 states: 0 between characters, 1-3 that many
// continuation bytes to go, 4 after E0 (A0-BF next), 5 after ED (80-9F), 6 after F0 (90-BF),
// 7 after F4 (80-8F).
namespace {

std::array<int32_t, 256> utf8_classes() {
  std::array<int32_t, 256> cls{};
  auto set = [&](int lo, int hi, int32_t c) {
    for (int b = lo; b <= hi; ++b) cls[static_cast<std::size_t>(b)] = c;
  };
  set(0x00, 0x7F, 0);
  set(0x80, 0x8F, 1);
  set(0x90, 0x9F, 2);
  set(0xA0, 0xBF, 3);
  set(0xC0, 0xC1, 4);
  set(0xF5, 0xFF, 4);
  set(0xC2, 0xDF, 5);
  set(0xE0, 0xE0, 6);
  set(0xE1, 0xEC, 7);
  set(0xEE, 0xEF, 7);
  set(0xED, 0xED, 8);
  set(0xF0, 0xF0, 9);
  set(0xF1, 0xF3, 10);
  set(0xF4, 0xF4, 11);
  return cls;
}
constexpr int32_t kUtf8Classes = 12;

// The next UTF-8 state, or -1; `lead`: a character starts here.
int32_t utf8_next(int32_t state, int32_t cls, bool& lead) {
  lead = false;
  switch (state) {
    case 0: {
      static const int32_t kAfterLead[kUtf8Classes] = {0, -1, -1, -1, -1, 1, 4, 2, 5, 6, 3, 7};
      lead = kAfterLead[cls] >= 0;
      return kAfterLead[cls];
    }
    case 1: return cls >= 1 && cls <= 3 ? 0 : -1;
    case 2: return cls >= 1 && cls <= 3 ? 1 : -1;
    case 3: return cls >= 1 && cls <= 3 ? 2 : -1;
    case 4: return cls == 3 ? 1 : -1;
    case 5: return cls == 1 || cls == 2 ? 1 : -1;
    case 6: return cls == 2 || cls == 3 ? 2 : -1;
    case 7: return cls == 1 ? 2 : -1;
    default: return -1;
  }
}

}  // namespace

Dfa utf8_dfa() {
  static const Dfa dfa = [] {
    Dfa d;
    d.cls = utf8_classes();
    d.classes = kUtf8Classes;
    d.accepting = {1, 0, 0, 0, 0, 0, 0, 0};
    for (int32_t state = 0; state < 8; ++state)
      for (int32_t c = 0; c < kUtf8Classes; ++c) {
        bool lead = false;
        d.next.push_back(utf8_next(state, c, lead));
      }
    return d;
  }();
  return dfa;
}

Dfa words_dfa(const std::vector<std::string>& words) {
  // A trie over the bytes the words use (one class each, one for every other byte).
  Dfa dfa;
  dfa.cls.fill(-1);
  int32_t classes = 0;
  for (const std::string& w : words)
    for (char c : w)
      if (dfa.cls[static_cast<uint8_t>(c)] < 0) dfa.cls[static_cast<uint8_t>(c)] = classes++;
  for (int32_t& c : dfa.cls)
    if (c < 0) c = classes;
  dfa.classes = classes + 1;
  const std::size_t k = static_cast<std::size_t>(dfa.classes);
  dfa.next.assign(k, -1);
  dfa.accepting = {0};
  for (const std::string& w : words) {
    int32_t s = 0;
    for (char c : w) {
      std::size_t at = static_cast<std::size_t>(s) * k + static_cast<std::size_t>(dfa.cls[static_cast<uint8_t>(c)]);
      if (dfa.next[at] < 0) {
        dfa.next[at] = dfa.states();
        dfa.next.resize(dfa.next.size() + k, -1);
        dfa.accepting.push_back(0);
      }
      s = dfa.next[at];
    }
    dfa.accepting[static_cast<std::size_t>(s)] = 1;
  }
  return minimize(dfa);
}

Dfa length_dfa(int64_t min_cp, int64_t max_cp, const DfaLimits& limits) {
  // States (count, utf8 state); the count saturates at min when there is no maximum. Minimal
  // as built (no two states accept the same strings), so no minimization.
  int64_t top = max_cp >= 0 ? max_cp : min_cp;
  if ((top + 1) * 8 > limits.max_states) throw DfaError(-1, "a length bound exceeds the automaton state limit");
  Dfa dfa;
  dfa.cls = utf8_classes();
  dfa.classes = kUtf8Classes;
  const int64_t n = (top + 1) * 8;
  dfa.next.assign(static_cast<std::size_t>(n) * kUtf8Classes, -1);
  dfa.accepting.assign(static_cast<std::size_t>(n), 0);
  for (int64_t k = 0; k <= top; ++k) {
    dfa.accepting[static_cast<std::size_t>(k * 8)] = k >= min_cp ? 1 : 0;
    for (int32_t state = 0; state < 8; ++state)
      for (int32_t c = 0; c < kUtf8Classes; ++c) {
        bool lead = false;
        int32_t next = utf8_next(state, c, lead);
        if (next < 0) continue;
        int64_t count = k;
        if (lead) {
          count = k + 1;
          if (count > top) {
            if (max_cp >= 0) continue;
            count = top;
          }
        }
        dfa.next[static_cast<std::size_t>((k * 8 + state) * kUtf8Classes + c)] = static_cast<int32_t>(count * 8 + next);
      }
  }
  return dfa;
}

Dfa containing(std::string_view needle) {
  // Knuth-Morris-Pratt: the state is how much of the needle ends the input; the whole needle
  // is absorbing.
  const int32_t n = static_cast<int32_t>(needle.size());
  std::vector<int32_t> border(needle.size(), 0);
  for (int32_t i = 1, k = 0; i < n; ++i) {
    while (k > 0 && needle[static_cast<std::size_t>(i)] != needle[static_cast<std::size_t>(k)])
      k = border[static_cast<std::size_t>(k - 1)];
    if (needle[static_cast<std::size_t>(i)] == needle[static_cast<std::size_t>(k)]) ++k;
    border[static_cast<std::size_t>(i)] = k;
  }
  Dfa dfa;
  for (int b = 0; b < 256; ++b) dfa.cls[static_cast<std::size_t>(b)] = b;
  dfa.classes = 256;
  for (int32_t state = 0; state <= n; ++state) {
    dfa.accepting.push_back(state == n ? 1 : 0);
    for (int b = 0; b < 256; ++b) {
      if (state == n) {
        dfa.next.push_back(n);
        continue;
      }
      int32_t k = state;
      while (k > 0 && static_cast<uint8_t>(needle[static_cast<std::size_t>(k)]) != b)
        k = border[static_cast<std::size_t>(k - 1)];
      if (static_cast<uint8_t>(needle[static_cast<std::size_t>(k)]) == b) ++k;
      dfa.next.push_back(k);
    }
  }
  return minimize(dfa);
}

Dfa intersect(const Dfa& a, const Dfa& b, const DfaLimits& limits) { return minimize(product(a, b, false, limits)); }

Dfa unite(const Dfa& a, const Dfa& b, const DfaLimits& limits) { return minimize(product(a, b, true, limits)); }

Dfa complement(const Dfa& a, const DfaLimits& limits) {
  Dfa total = a;
  int32_t dead = total.states();
  total.accepting.push_back(0);
  total.next.resize(total.next.size() + static_cast<std::size_t>(total.classes), dead);
  for (int32_t& t : total.next)
    if (t < 0) t = dead;
  if (total.start < 0) total.start = dead;
  for (uint8_t& acc : total.accepting) acc = acc ? 0 : 1;
  return intersect(total, utf8_dfa(), limits);
}

Dfa minimize(const Dfa& a) {
  const int32_t n = a.states();
  const int32_t k = a.classes;
  auto next_of = [&](int32_t s, int32_t c) {
    return a.next[static_cast<std::size_t>(s) * static_cast<std::size_t>(k) + static_cast<std::size_t>(c)];
  };
  if (a.start < 0 || n == 0) return Dfa::nothing();
  // Live states: reachable from the start and reaching an accepting state.
  std::vector<uint8_t> reach(static_cast<std::size_t>(n), 0), live(static_cast<std::size_t>(n), 0);
  std::vector<int32_t> stack{a.start};
  reach[static_cast<std::size_t>(a.start)] = 1;
  while (!stack.empty()) {
    int32_t s = stack.back();
    stack.pop_back();
    for (int32_t c = 0; c < k; ++c) {
      int32_t t = next_of(s, c);
      if (t >= 0 && !reach[static_cast<std::size_t>(t)]) {
        reach[static_cast<std::size_t>(t)] = 1;
        stack.push_back(t);
      }
    }
  }
  std::vector<std::vector<int32_t>> preds(static_cast<std::size_t>(n));
  for (int32_t s = 0; s < n; ++s) {
    if (!reach[static_cast<std::size_t>(s)]) continue;
    for (int32_t c = 0; c < k; ++c) {
      int32_t t = next_of(s, c);
      if (t >= 0) preds[static_cast<std::size_t>(t)].push_back(s);
    }
    if (a.accepting[static_cast<std::size_t>(s)]) {
      live[static_cast<std::size_t>(s)] = 1;
      stack.push_back(s);
    }
  }
  while (!stack.empty()) {
    int32_t s = stack.back();
    stack.pop_back();
    for (int32_t p : preds[static_cast<std::size_t>(s)])
      if (!live[static_cast<std::size_t>(p)]) {
        live[static_cast<std::size_t>(p)] = 1;
        stack.push_back(p);
      }
  }
  if (!live[static_cast<std::size_t>(a.start)]) return Dfa::nothing();
  // A total automaton over the live states plus one dead state (index m).
  std::vector<int32_t> index(static_cast<std::size_t>(n), -1);
  std::vector<int32_t> old_of;
  for (int32_t s = 0; s < n; ++s)
    if (live[static_cast<std::size_t>(s)]) {
      index[static_cast<std::size_t>(s)] = static_cast<int32_t>(old_of.size());
      old_of.push_back(s);
    }
  const int32_t m = static_cast<int32_t>(old_of.size());
  const int32_t total = m + 1;
  std::vector<int32_t> delta(static_cast<std::size_t>(total) * static_cast<std::size_t>(k), m);
  for (int32_t i = 0; i < m; ++i)
    for (int32_t c = 0; c < k; ++c) {
      int32_t t = next_of(old_of[static_cast<std::size_t>(i)], c);
      if (t >= 0 && live[static_cast<std::size_t>(t)])
        delta[static_cast<std::size_t>(i) * static_cast<std::size_t>(k) + static_cast<std::size_t>(c)] = index[static_cast<std::size_t>(t)];
    }
  // Inverse transitions per class (CSR).
  std::vector<int32_t> inv_start(static_cast<std::size_t>(k) * static_cast<std::size_t>(total + 1), 0);
  std::vector<int32_t> inv_list(static_cast<std::size_t>(total) * static_cast<std::size_t>(k));
  {
    std::vector<int32_t> count(static_cast<std::size_t>(k) * static_cast<std::size_t>(total), 0);
    for (int32_t s = 0; s < total; ++s)
      for (int32_t c = 0; c < k; ++c)
        ++count[static_cast<std::size_t>(c) * static_cast<std::size_t>(total) +
                static_cast<std::size_t>(delta[static_cast<std::size_t>(s) * static_cast<std::size_t>(k) + static_cast<std::size_t>(c)])];
    int32_t acc = 0;
    for (int32_t c = 0; c < k; ++c) {
      for (int32_t t = 0; t < total; ++t) {
        inv_start[static_cast<std::size_t>(c) * static_cast<std::size_t>(total + 1) + static_cast<std::size_t>(t)] = acc;
        acc += count[static_cast<std::size_t>(c) * static_cast<std::size_t>(total) + static_cast<std::size_t>(t)];
      }
      inv_start[static_cast<std::size_t>(c) * static_cast<std::size_t>(total + 1) + static_cast<std::size_t>(total)] = acc;
    }
    std::vector<int32_t> fill(inv_start);
    for (int32_t s = 0; s < total; ++s)
      for (int32_t c = 0; c < k; ++c) {
        int32_t t = delta[static_cast<std::size_t>(s) * static_cast<std::size_t>(k) + static_cast<std::size_t>(c)];
        inv_list[static_cast<std::size_t>(fill[static_cast<std::size_t>(c) * static_cast<std::size_t>(total + 1) + static_cast<std::size_t>(t)]++)] = s;
      }
  }
  // Hopcroft's partition refinement.
  std::vector<int32_t> elems(static_cast<std::size_t>(total)), pos(static_cast<std::size_t>(total)),
      block(static_cast<std::size_t>(total));
  std::vector<int32_t> bstart, bend, marked;
  std::vector<uint8_t> in_work;
  {
    int32_t at = 0;
    for (int pass = 0; pass < 2; ++pass) {
      int32_t begin = at;
      for (int32_t s = 0; s < total; ++s) {
        bool acc = s < m && a.accepting[static_cast<std::size_t>(old_of[static_cast<std::size_t>(s)])];
        if (acc == (pass == 0)) {
          elems[static_cast<std::size_t>(at)] = s;
          pos[static_cast<std::size_t>(s)] = at;
          block[static_cast<std::size_t>(s)] = static_cast<int32_t>(bstart.size());
          ++at;
        }
      }
      if (at > begin) {
        bstart.push_back(begin);
        bend.push_back(at);
      }
    }
  }
  marked.assign(bstart.size(), 0);
  in_work.assign(bstart.size(), 1);
  std::vector<int32_t> work;
  for (int32_t b = 0; b < static_cast<int32_t>(bstart.size()); ++b) work.push_back(b);
  std::vector<uint8_t> is_marked(static_cast<std::size_t>(total), 0);
  std::vector<int32_t> touched, splitter;
  while (!work.empty()) {
    int32_t w = work.back();
    work.pop_back();
    in_work[static_cast<std::size_t>(w)] = 0;
    splitter.assign(elems.begin() + bstart[static_cast<std::size_t>(w)], elems.begin() + bend[static_cast<std::size_t>(w)]);
    for (int32_t c = 0; c < k; ++c) {
      touched.clear();
      for (int32_t t : splitter) {
        std::size_t base = static_cast<std::size_t>(c) * static_cast<std::size_t>(total + 1);
        for (int32_t i = inv_start[base + static_cast<std::size_t>(t)]; i < inv_start[base + static_cast<std::size_t>(t) + 1]; ++i) {
          int32_t s = inv_list[static_cast<std::size_t>(i)];
          if (is_marked[static_cast<std::size_t>(s)]) continue;
          is_marked[static_cast<std::size_t>(s)] = 1;
          int32_t b = block[static_cast<std::size_t>(s)];
          int32_t dest = bstart[static_cast<std::size_t>(b)] + marked[static_cast<std::size_t>(b)];
          int32_t other = elems[static_cast<std::size_t>(dest)];
          std::swap(elems[static_cast<std::size_t>(dest)], elems[static_cast<std::size_t>(pos[static_cast<std::size_t>(s)])]);
          pos[static_cast<std::size_t>(other)] = pos[static_cast<std::size_t>(s)];
          pos[static_cast<std::size_t>(s)] = dest;
          if (marked[static_cast<std::size_t>(b)]++ == 0) touched.push_back(b);
        }
      }
      for (int32_t b : touched) {
        int32_t count = marked[static_cast<std::size_t>(b)];
        marked[static_cast<std::size_t>(b)] = 0;
        for (int32_t i = bstart[static_cast<std::size_t>(b)]; i < bstart[static_cast<std::size_t>(b)] + count; ++i)
          is_marked[static_cast<std::size_t>(elems[static_cast<std::size_t>(i)])] = 0;
        int32_t size = bend[static_cast<std::size_t>(b)] - bstart[static_cast<std::size_t>(b)];
        if (count == size) continue;
        int32_t nb = static_cast<int32_t>(bstart.size());
        bstart.push_back(bstart[static_cast<std::size_t>(b)]);
        bend.push_back(bstart[static_cast<std::size_t>(b)] + count);
        bstart[static_cast<std::size_t>(b)] += count;
        marked.push_back(0);
        in_work.push_back(0);
        for (int32_t i = bstart[static_cast<std::size_t>(nb)]; i < bend[static_cast<std::size_t>(nb)]; ++i)
          block[static_cast<std::size_t>(elems[static_cast<std::size_t>(i)])] = nb;
        if (in_work[static_cast<std::size_t>(b)]) {
          in_work[static_cast<std::size_t>(nb)] = 1;
          work.push_back(nb);
        } else {
          int32_t smaller = count <= size - count ? nb : b;
          in_work[static_cast<std::size_t>(smaller)] = 1;
          work.push_back(smaller);
        }
      }
    }
  }
  // The quotient automaton without the dead block, with classes that no state tells apart merged.
  int32_t dead_block = block[static_cast<std::size_t>(m)];
  std::vector<int32_t> new_id(bstart.size(), -1);
  std::vector<int32_t> rep_of;
  // Number blocks in BFS order from the start, for stable, readable output.
  {
    std::vector<int32_t> queue{block[static_cast<std::size_t>(index[static_cast<std::size_t>(a.start)])]};
    new_id[static_cast<std::size_t>(queue[0])] = 0;
    for (std::size_t head = 0; head < queue.size(); ++head) {
      int32_t b = queue[head];
      int32_t rep = elems[static_cast<std::size_t>(bstart[static_cast<std::size_t>(b)])];
      rep_of.push_back(rep);
      for (int32_t c = 0; c < k; ++c) {
        int32_t tb = block[static_cast<std::size_t>(delta[static_cast<std::size_t>(rep) * static_cast<std::size_t>(k) + static_cast<std::size_t>(c)])];
        if (tb == dead_block || new_id[static_cast<std::size_t>(tb)] >= 0) continue;
        new_id[static_cast<std::size_t>(tb)] = static_cast<int32_t>(queue.size());
        queue.push_back(tb);
      }
    }
  }
  const int32_t states = static_cast<int32_t>(rep_of.size());
  std::vector<int32_t> table(static_cast<std::size_t>(states) * static_cast<std::size_t>(k));
  for (int32_t i = 0; i < states; ++i)
    for (int32_t c = 0; c < k; ++c) {
      int32_t tb = block[static_cast<std::size_t>(delta[static_cast<std::size_t>(rep_of[static_cast<std::size_t>(i)]) * static_cast<std::size_t>(k) + static_cast<std::size_t>(c)])];
      table[static_cast<std::size_t>(i) * static_cast<std::size_t>(k) + static_cast<std::size_t>(c)] =
          tb == dead_block ? -1 : new_id[static_cast<std::size_t>(tb)];
    }
  std::map<std::vector<int32_t>, int32_t> class_ids;
  std::vector<int32_t> class_map(static_cast<std::size_t>(k));
  for (int32_t c = 0; c < k; ++c) {
    std::vector<int32_t> column(static_cast<std::size_t>(states));
    for (int32_t i = 0; i < states; ++i) column[static_cast<std::size_t>(i)] = table[static_cast<std::size_t>(i) * static_cast<std::size_t>(k) + static_cast<std::size_t>(c)];
    auto [it, added] = class_ids.emplace(std::move(column), static_cast<int32_t>(class_ids.size()));
    class_map[static_cast<std::size_t>(c)] = it->second;
  }
  Dfa out;
  out.classes = static_cast<int32_t>(class_ids.size());
  for (int b = 0; b < 256; ++b) out.cls[static_cast<std::size_t>(b)] = class_map[static_cast<std::size_t>(a.cls[static_cast<std::size_t>(b)])];
  out.next.assign(static_cast<std::size_t>(states) * static_cast<std::size_t>(out.classes), -1);
  for (int32_t i = 0; i < states; ++i)
    for (int32_t c = 0; c < k; ++c)
      out.next[static_cast<std::size_t>(i) * static_cast<std::size_t>(out.classes) + static_cast<std::size_t>(class_map[static_cast<std::size_t>(c)])] =
          table[static_cast<std::size_t>(i) * static_cast<std::size_t>(k) + static_cast<std::size_t>(c)];
  out.accepting.resize(static_cast<std::size_t>(states));
  for (int32_t i = 0; i < states; ++i)
    out.accepting[static_cast<std::size_t>(i)] = rep_of[static_cast<std::size_t>(i)] < m &&
        a.accepting[static_cast<std::size_t>(old_of[static_cast<std::size_t>(rep_of[static_cast<std::size_t>(i)])])];
  out.start = 0;
  return out;
}

RuleId emit_dfa(Grammar& grammar, const Dfa& dfa, DfaEncoding encoding, const Sequence& suffix, const std::string& name) {
  const int32_t n = dfa.states();
  std::vector<ByteSet> class_bytes(static_cast<std::size_t>(dfa.classes));
  for (int b = 0; b < 256; ++b) class_bytes[static_cast<std::size_t>(dfa.cls[static_cast<std::size_t>(b)])].add(static_cast<uint8_t>(b));
  std::vector<RuleId> rules(static_cast<std::size_t>(n));
  for (int32_t s = 0; s < n; ++s) rules[static_cast<std::size_t>(s)] = grammar.add_rule(name + "." + std::to_string(s));
  std::map<std::array<uint64_t, 4>, Symbol> terminals;  // Grammar::terminal searches linearly
  auto terminal = [&](const ByteSet& set) {
    auto it = terminals.find(set.words);
    if (it == terminals.end()) it = terminals.emplace(set.words, grammar.terminal(set)).first;
    return it->second;
  };
  const Symbol backslash = terminal(ByteSet::of('\\'));
  static const char kShort[][2] = {{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'\b', 'b'}, {'\f', 'f'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};
  static const char kHex[] = "0123456789abcdef";
  for (int32_t s = 0; s < n; ++s) {
    RuleId rule = rules[static_cast<std::size_t>(s)];
    if (dfa.accepting[static_cast<std::size_t>(s)]) grammar.add_alternative(rule, suffix);
    std::vector<std::pair<int32_t, ByteSet>> by_target;
    for (int32_t c = 0; c < dfa.classes; ++c) {
      int32_t t = dfa.next[static_cast<std::size_t>(s) * static_cast<std::size_t>(dfa.classes) + static_cast<std::size_t>(c)];
      if (t < 0) continue;
      auto it = std::find_if(by_target.begin(), by_target.end(), [&](const auto& e) { return e.first == t; });
      if (it == by_target.end()) {
        by_target.push_back({t, class_bytes[static_cast<std::size_t>(c)]});
      } else {
        it->second.add(class_bytes[static_cast<std::size_t>(c)]);
      }
    }
    for (const auto& [t, bytes] : by_target) {
      Symbol next = Grammar::rule(rules[static_cast<std::size_t>(t)]);
      if (encoding == DfaEncoding::raw) {
        grammar.add_alternative(rule, {terminal(bytes), next});
        continue;
      }
      ByteSet raw;
      for (int b = 0x20; b < 256; ++b)
        if (bytes.contains(static_cast<uint8_t>(b)) && b != '"' && b != '\\') raw.add(static_cast<uint8_t>(b));
      if (!raw.empty()) grammar.add_alternative(rule, {terminal(raw), next});
      ByteSet letters;
      for (const auto& [decoded, letter] : kShort)
        if (bytes.contains(static_cast<uint8_t>(decoded))) letters.add(static_cast<uint8_t>(letter));
      if (!letters.empty()) grammar.add_alternative(rule, {backslash, terminal(letters), next});
      for (int hi = 0; hi < 2; ++hi) {
        ByteSet lows;
        for (int lo = 0; lo < 16; ++lo)
          if (bytes.contains(static_cast<uint8_t>(hi * 16 + lo))) {
            lows.add(static_cast<uint8_t>(kHex[lo]));
            if (lo >= 10) lows.add(static_cast<uint8_t>(kHex[lo] - 'a' + 'A'));
          }
        if (lows.empty()) continue;
        Sequence seq = {backslash};
        for (char c : std::string_view(hi == 0 ? "u000" : "u001")) seq.push_back(terminal(ByteSet::of(static_cast<uint8_t>(c))));
        seq.push_back(terminal(lows));
        seq.push_back(next);
        grammar.add_alternative(rule, std::move(seq));
      }
    }
  }
  return rules[static_cast<std::size_t>(dfa.start)];
}

}  // namespace deepinfer::grammar::schema

// ECMAScript regular expressions (the subset compile.h lists) to a Grammar, by recursive descent
// straight into rules: an alternation is a rule, a quantifier Builder::repeat, a class or `.`
// the UTF-8 sequences of its code points.
#include <algorithm>
#include <string>

#include "grammar/compile.h"
#include "grammar/compile_util.h"

namespace deepinfer::grammar {

namespace {

using detail::Builder;
using detail::CodeSet;
using detail::RegexOptions;
using detail::refuse;

constexpr int64_t kSaturate = int64_t{1} << 40;

class RegexParser {
 public:
  RegexParser(Builder& builder, std::string_view pattern, const RegexOptions& options)
      : b_(builder), p_(pattern), options_(options) {}

  RuleId parse() {
    const RuleId top = b_.rule("regex");
    Sequence any_star;
    if (!options_.anchored) any_star = b_.repeat(b_.code_set(CodeSet::any(), at(0)), 0, -1, at(0));
    while (true) {
      const std::size_t start = pos_;
      bool caret = false, dollar = false;
      Sequence body = concat(0, &caret, &dollar);
      Sequence seq;
      // Unanchored: the match may start and end anywhere, unless ^ / $ pin that side.
      if (!options_.anchored && !caret) seq.insert(seq.end(), any_star.begin(), any_star.end());
      seq.insert(seq.end(), body.begin(), body.end());
      if (!options_.anchored && !dollar) seq.insert(seq.end(), any_star.begin(), any_star.end());
      b_.alt(top, std::move(seq), at(start));
      if (pos_ >= p_.size()) break;
      if (p_[pos_] == ')') refuse(at(pos_), "unmatched ')'");
      ++pos_;  // '|'
    }
    return top;
  }

 private:
  std::size_t at(std::size_t i) const { return options_.base + i; }
  bool more() const { return pos_ < p_.size(); }

  // A sequence of quantified atoms up to '|', ')' or the end. `caret` / `dollar` (top level
  // only) receive a ^ at the start / $ at the end of this alternative.
  Sequence concat(int depth, bool* caret, bool* dollar) {
    Sequence seq;
    bool atoms = false;
    while (more() && p_[pos_] != '|' && p_[pos_] != ')') {
      const std::size_t start = pos_;
      const char c = p_[pos_];
      if (c == '^') {
        if (!caret || atoms) refuse(at(pos_), "^ is supported only at the start of the pattern");
        *caret = true;
        ++pos_;
        if (quantifier_at(pos_)) refuse(at(pos_), "nothing to repeat");
        continue;
      }
      if (c == '$') {
        if (!dollar || (pos_ + 1 < p_.size() && p_[pos_ + 1] != '|'))
          refuse(at(pos_), "$ is supported only at the end of the pattern");
        *dollar = true;
        ++pos_;
        continue;
      }
      Sequence item = atom(depth);
      int64_t min = 0, max = 0;
      if (quantifier(min, max)) {
        if (more() && p_[pos_] == '?') ++pos_;  // lazy: the same language
        if (quantifier_at(pos_)) refuse(at(pos_), "nothing to repeat");
        item = b_.repeat(std::move(item), min, max, at(start));
      }
      b_.check_room(static_cast<int64_t>(seq.size() + item.size()), at(start));
      seq.insert(seq.end(), item.begin(), item.end());
      atoms = true;
    }
    return seq;
  }

  // {n}, {n,} or {n,m} at i: its end (one past '}'), or 0 when i starts no such quantifier
  // (then '{' is a literal, as ECMAScript's Annex B reads it).
  std::size_t braces_at(std::size_t i, int64_t* min, int64_t* max) const {
    if (i >= p_.size() || p_[i] != '{') return 0;
    ++i;
    const auto number = [&](int64_t& value) {
      const std::size_t begin = i;
      value = 0;
      while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
        value = std::min(kSaturate, value * 10 + (p_[i] - '0'));
        ++i;
      }
      return i > begin;
    };
    int64_t lo = 0, hi = 0;
    if (!number(lo)) return 0;
    hi = lo;
    if (i < p_.size() && p_[i] == ',') {
      ++i;
      if (!number(hi)) hi = -1;
    }
    if (i >= p_.size() || p_[i] != '}') return 0;
    if (min) *min = lo;
    if (max) *max = hi;
    return i + 1;
  }

  bool quantifier_at(std::size_t i) const {
    if (i >= p_.size()) return false;
    const char c = p_[i];
    return c == '*' || c == '+' || c == '?' || braces_at(i, nullptr, nullptr) != 0;
  }

  bool quantifier(int64_t& min, int64_t& max) {
    if (!more()) return false;
    switch (p_[pos_]) {
      case '*': min = 0, max = -1, ++pos_; return true;
      case '+': min = 1, max = -1, ++pos_; return true;
      case '?': min = 0, max = 1, ++pos_; return true;
      default: break;
    }
    const std::size_t end = braces_at(pos_, &min, &max);
    if (end == 0) return false;
    if (max >= 0 && min > max) refuse(at(pos_), "numbers out of order in {} quantifier");
    b_.check_repeat(min, max, at(pos_));
    pos_ = end;
    return true;
  }

  CodeSet dot() const {
    CodeSet excluded = CodeSet::of('\n');
    if (options_.dot == RegexOptions::Dot::all) return CodeSet::any();
    if (options_.dot == RegexOptions::Dot::ecmascript) {
      excluded.add('\r');
      excluded.add(0x2028);
      excluded.add(0x2029);
    }
    return excluded.complement();
  }

  Sequence atom(int depth) {
    const std::size_t start = pos_;
    const char c = p_[pos_];
    switch (c) {
      case '(': return group(depth);
      case '[': return b_.code_set(char_class(), at(start));
      case '.': ++pos_; return b_.code_set(dot(), at(start));
      case '\\': return escape();
      case '*':
      case '+':
      case '?': refuse(at(pos_), "nothing to repeat");
      case '{':
        if (braces_at(pos_, nullptr, nullptr)) refuse(at(pos_), "nothing to repeat");
        ++pos_;
        return {b_.byte('{')};
      default: break;
    }
    uint32_t cp;
    if (!detail::decode_utf8(p_, pos_, cp)) refuse(at(pos_), "invalid UTF-8 in the pattern");
    return b_.literal(p_.substr(start, pos_ - start));
  }

  Sequence group(int depth) {
    const std::size_t open = pos_;
    if (depth + 1 > b_.limits().max_depth)
      refuse(at(open), str_cat("groups nested deeper than ", b_.limits().max_depth));
    ++pos_;
    if (more() && p_[pos_] == '?') {
      const std::string_view rest = p_.substr(pos_ + 1);
      if (rest.starts_with(":")) {
        pos_ += 2;
      } else if (rest.starts_with("=") || rest.starts_with("!")) {
        refuse(at(open), "lookahead (?= (?! is not supported");
      } else if (rest.starts_with("<=") || rest.starts_with("<!")) {
        refuse(at(open), "lookbehind (?<= (?<! is not supported");
      } else if (rest.starts_with("<")) {
        // A named group: a plain group here (no backreferences).
        std::size_t i = pos_ + 2;
        const auto name_char = [](char ch, bool first) {
          return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == '$' ||
                 (!first && ch >= '0' && ch <= '9');
        };
        const std::size_t name_start = i;
        while (i < p_.size() && name_char(p_[i], i == name_start)) ++i;
        if (i == name_start || i >= p_.size() || p_[i] != '>') refuse(at(open), "malformed group name (?<name>");
        pos_ = i + 1;
      } else {
        refuse(at(open), "flags and (?... groups other than (?: and (?<name> are not supported");
      }
    }
    Sequence first = concat(depth + 1, nullptr, nullptr);
    Sequence result;
    if (more() && p_[pos_] == '|') {
      const RuleId rule = b_.rule("group");
      b_.alt(rule, std::move(first), at(open));
      while (more() && p_[pos_] == '|') {
        ++pos_;
        const std::size_t start = pos_;
        b_.alt(rule, concat(depth + 1, nullptr, nullptr), at(start));
      }
      result = {Grammar::rule(rule)};
    } else {
      result = std::move(first);
    }
    if (!more()) refuse(at(open), "unterminated group: missing ')'");
    ++pos_;  // ')'
    return result;
  }

  // After '\' outside a class.
  Sequence escape() {
    const std::size_t backslash = pos_++;
    if (!more()) refuse(at(backslash), "\\ at the end of the pattern");
    const char c = p_[pos_];
    switch (c) {
      case 'd': ++pos_; return b_.code_set(detail::digit_set(), at(backslash));
      case 'D': ++pos_; return b_.code_set(detail::digit_set().complement(), at(backslash));
      case 'w': ++pos_; return b_.code_set(detail::word_set(), at(backslash));
      case 'W': ++pos_; return b_.code_set(detail::word_set().complement(), at(backslash));
      case 's': ++pos_; return b_.code_set(detail::space_set(), at(backslash));
      case 'S': ++pos_; return b_.code_set(detail::space_set().complement(), at(backslash));
      case 'b':
      case 'B': refuse(at(backslash), "word boundaries \\b \\B are not supported");
      case 'k': refuse(at(backslash), "backreferences are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') refuse(at(backslash), "backreferences are not supported");
    return b_.code_set(CodeSet::of(char_escape(backslash)), at(backslash));
  }

  // A character escape (after '\', in or out of a class): its code point.
  uint32_t char_escape(std::size_t backslash) {
    const char c = p_[pos_];
    if (c == 'p' || c == 'P') refuse(at(backslash), "Unicode property escapes \\p \\P are not supported");
    if (c == 'c') {
      const char letter = pos_ + 1 < p_.size() ? p_[pos_ + 1] : 0;
      if (!((letter >= 'a' && letter <= 'z') || (letter >= 'A' && letter <= 'Z')))
        refuse(at(backslash), "\\c needs a letter");
      pos_ += 2;
      return static_cast<uint32_t>(letter) & 31;
    }
    uint32_t cp = 0;
    if (!detail::parse_char_escape(p_, pos_, cp, options_.base)) {
      std::size_t end = pos_;
      uint32_t ignored;
      if (!detail::decode_utf8(p_, end, ignored)) end = pos_ + 1;
      refuse(at(backslash), "bad escape \\" + std::string(p_.substr(pos_, end - pos_)));
    }
    return cp;
  }

  // One member of a class: a code point, or (is_set) a class escape.
  struct ClassAtom {
    bool is_set = false;
    uint32_t cp = 0;
    CodeSet set;
  };

  ClassAtom class_atom(std::size_t open) {
    ClassAtom out;
    if (p_[pos_] != '\\') {
      if (!detail::decode_utf8(p_, pos_, out.cp)) refuse(at(pos_), "invalid UTF-8 in the pattern");
      return out;
    }
    const std::size_t backslash = pos_++;
    if (!more()) refuse(at(open), "unterminated character class");
    const char c = p_[pos_];
    out.is_set = true;
    switch (c) {
      case 'd': ++pos_; out.set = detail::digit_set(); return out;
      case 'D': ++pos_; out.set = detail::digit_set().complement(); return out;
      case 'w': ++pos_; out.set = detail::word_set(); return out;
      case 'W': ++pos_; out.set = detail::word_set().complement(); return out;
      case 's': ++pos_; out.set = detail::space_set(); return out;
      case 'S': ++pos_; out.set = detail::space_set().complement(); return out;
      case 'b': ++pos_; out.is_set = false; out.cp = 0x08; return out;  // [\b] is backspace
      case '-': ++pos_; out.is_set = false; out.cp = '-'; return out;
      case 'B': refuse(at(backslash), "bad escape \\B in a character class");
      default: break;
    }
    if (c >= '1' && c <= '9') refuse(at(backslash), "bad escape \\" + std::string(1, c) + " in a character class");
    out.is_set = false;
    out.cp = char_escape(backslash);
    return out;
  }

  CodeSet char_class() {
    const std::size_t open = pos_++;
    bool negated = false;
    if (more() && p_[pos_] == '^') negated = true, ++pos_;
    CodeSet set;
    while (true) {
      if (!more()) refuse(at(open), "unterminated character class");
      if (p_[pos_] == ']') {
        ++pos_;
        break;
      }
      const std::size_t start = pos_;
      ClassAtom first = class_atom(open);
      if (!first.is_set && pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        ClassAtom last = class_atom(open);
        if (last.is_set) {
          // [a-\d]: Annex B reads the '-' literally.
          set.add(first.cp);
          set.add('-');
          set.add(last.set);
          continue;
        }
        if (last.cp < first.cp) refuse(at(start), "range out of order in character class");
        set.add_range(first.cp, last.cp);
      } else if (first.is_set) {
        set.add(first.set);
      } else {
        set.add(first.cp);
      }
    }
    return negated ? set.complement() : set;
  }

  Builder& b_;
  std::string_view p_;
  RegexOptions options_;
  std::size_t pos_ = 0;
};

}  // namespace

namespace detail {

RuleId compile_regex_into(Builder& builder, std::string_view pattern, const RegexOptions& options) {
  return RegexParser(builder, pattern, options).parse();
}

}  // namespace detail

Grammar compile_regex(std::string_view pattern, bool anchored, const CompileLimits& limits) {
  Grammar grammar;
  detail::Builder builder(grammar, limits);
  detail::RegexOptions options;
  options.anchored = anchored;
  grammar.set_start(detail::compile_regex_into(builder, pattern, options));
  grammar.validate();
  return grammar;
}

}  // namespace deepinfer::grammar

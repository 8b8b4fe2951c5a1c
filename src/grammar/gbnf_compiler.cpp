// llama.cpp's GBNF (grammars/README.md) to a Grammar: `name ::= alternatives`, "literals",
// [classes] and [^negated] ones over code points, `.`, (groups), rule references (recursion, left
// recursion included), the postfix operators * + ? {n} {n,} {n,m} (and {,m}), # comments. A rule
// ends where the next `name ::=` begins (llama.cpp ends it at a newline outside a group unless
// the line ends with '|'; every grammar it takes reads the same here). The start rule is `root`.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "grammar/compile.h"
#include "grammar/compile_util.h"

namespace deepinfer::grammar {

namespace {

using detail::Builder;
using detail::CodeSet;
using detail::refuse;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class GbnfParser {
 public:
  GbnfParser(Builder& builder, std::string_view text) : b_(builder), t_(text) {}

  RuleId parse() {
    pos_ = space(pos_, true);
    while (pos_ < t_.size()) {
      const std::size_t name_at = pos_;
      const std::string name = read_name();
      if (name.empty()) refuse(pos_, "expected a rule name");
      pos_ = space(pos_, false);
      if (!t_.substr(pos_).starts_with("::=")) refuse(pos_, "expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      Entry& entry = lookup(name, name_at);
      if (entry.defined) refuse(name_at, "rule '" + name + "' is defined twice");
      entry.defined = true;
      alternates(0, false, entry.id);
      if (pos_ < t_.size() && t_[pos_] == ')') refuse(pos_, "unmatched ')'");
      pos_ = space(pos_, true);
    }
    // Undefined rules, the first use in the text first.
    const Entry* missing = nullptr;
    std::string missing_name;
    for (const auto& [name, entry] : rules_) {
      if (!entry.defined && (!missing || entry.first_use < missing->first_use)) {
        missing = &entry;
        missing_name = name;
      }
    }
    if (missing) refuse(missing->first_use, "undefined rule '" + missing_name + "'");
    const auto root = rules_.find("root");
    if (root == rules_.end()) refuse(0, "no rule named 'root' (the start rule)");
    return root->second.id;
  }

 private:
  struct Entry {
    RuleId id;
    bool defined = false;
    std::size_t first_use;
  };

  Entry& lookup(const std::string& name, std::size_t at) {
    auto found = rules_.find(name);
    if (found == rules_.end()) found = rules_.emplace(name, Entry{b_.rule(name), false, at}).first;
    return found->second;
  }

  std::size_t space(std::size_t pos, bool newlines) const { return detail::skip_space(t_, pos, newlines, "#"); }

  std::string read_name() {
    const std::size_t start = pos_;
    while (pos_ < t_.size() && name_char(t_[pos_])) ++pos_;
    return std::string(t_.substr(start, pos_ - start));
  }

  // `name ::=` at i (after spaces)?
  bool rule_header_at(std::size_t i) const {
    const std::size_t start = i;
    while (i < t_.size() && name_char(t_[i])) ++i;
    if (i == start) return false;
    i = space(i, false);
    return t_.substr(i).starts_with("::=");
  }

  // Alternatives up to ')' (nested) or the end of the rule, into `target` when given (the rule
  // being defined), else as a sequence (one alternative) or a new rule.
  Sequence alternates(int depth, bool nested, RuleId target = -1) {
    const std::size_t start = pos_;
    Sequence first = sequence(depth, nested);
    if (target < 0 && (pos_ >= t_.size() || t_[pos_] != '|')) return first;
    const RuleId rule = target >= 0 ? target : b_.rule("group");
    b_.alt(rule, std::move(first), start);
    while (pos_ < t_.size() && t_[pos_] == '|') {
      ++pos_;
      const std::size_t at = pos_;
      b_.alt(rule, sequence(depth, nested), at);
    }
    return {Grammar::rule(rule)};
  }

  Sequence sequence(int depth, bool nested) {
    Sequence seq;
    while (true) {
      pos_ = space(pos_, nested);
      if (!nested && pos_ < t_.size() && (t_[pos_] == '\n' || t_[pos_] == '\r')) {
        // A newline outside a group: the rule goes on unless the next rule (or the end) follows.
        const std::size_t next = space(pos_, true);
        if (next >= t_.size() || rule_header_at(next)) {
          pos_ = next;
          break;
        }
        pos_ = next;
        continue;
      }
      if (pos_ >= t_.size()) break;  // in a group, the caller reports the missing ')'
      const char c = t_[pos_];
      if (c == '|' || c == ')') break;
      const std::size_t start = pos_;
      Sequence item = element(depth);
      // Postfix operators, each applying to what precedes it.
      while (true) {
        const std::size_t op = space(pos_, nested);
        if (op >= t_.size()) break;
        int64_t min, max;
        if (t_[op] == '*') {
          min = 0, max = -1, pos_ = op + 1;
        } else if (t_[op] == '+') {
          min = 1, max = -1, pos_ = op + 1;
        } else if (t_[op] == '?') {
          min = 0, max = 1, pos_ = op + 1;
        } else if (t_[op] == '{') {
          pos_ = op;
          braces(min, max);
        } else {
          break;
        }
        item = b_.repeat(std::move(item), min, max, start);
      }
      b_.check_room(static_cast<int64_t>(seq.size() + item.size()), start);
      seq.insert(seq.end(), item.begin(), item.end());
    }
    return seq;
  }

  // {n} {n,} {n,m} {,m} at pos_.
  void braces(int64_t& min, int64_t& max) {
    const std::size_t open = pos_++;
    const auto number = [&](int64_t& value) {
      pos_ = space(pos_, true);
      const std::size_t begin = pos_;
      value = 0;
      while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') {
        value = std::min(int64_t{1} << 40, value * 10 + (t_[pos_] - '0'));
        ++pos_;
      }
      pos_ = space(pos_, true);
      return pos_ > begin && t_[begin] >= '0' && t_[begin] <= '9';
    };
    const bool has_min = number(min);
    if (!has_min) min = 0;
    max = min;
    if (pos_ < t_.size() && t_[pos_] == ',') {
      ++pos_;
      if (!number(max)) max = -1;
    } else if (!has_min) {
      refuse(open, "malformed repetition {...}");
    }
    if (pos_ >= t_.size() || t_[pos_] != '}') refuse(open, "malformed repetition {...}");
    ++pos_;
    b_.check_repeat(min, max, open);
  }

  Sequence element(int depth) {
    const std::size_t start = pos_;
    const char c = t_[pos_];
    if (c == '"') return string_literal();
    if (c == '[') return b_.code_set(char_class(), start);
    if (c == '.') {
      ++pos_;
      return b_.code_set(CodeSet::any(), start);
    }
    if (c == '(') {
      if (depth + 1 > b_.limits().max_depth)
        refuse(start, str_cat("groups nested deeper than ", b_.limits().max_depth));
      ++pos_;
      Sequence inner = alternates(depth + 1, true);
      pos_ = space(pos_, true);
      if (pos_ >= t_.size() || t_[pos_] != ')') refuse(start, "unterminated group: missing ')'");
      ++pos_;
      return inner;
    }
    if (name_char(c)) {
      const std::string name = read_name();
      return {Grammar::rule(lookup(name, start).id)};
    }
    if (c == '<' || c == '!') refuse(start, "token references (<...>, !<...>) are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{') refuse(start, "nothing to repeat");
    refuse(start, std::string("unexpected character '") + c + "'");
  }

  // One character of a literal or class at pos_: an escape or a UTF-8 code point.
  uint32_t character() {
    uint32_t cp = 0;
    if (t_[pos_] == '\\') {
      const std::size_t backslash = pos_++;
      detail::EscapeOptions options;
      options.long_u = true;
      if (pos_ >= t_.size() || !detail::parse_char_escape(t_, pos_, cp, 0, options))
        refuse(backslash, "bad escape");
      return cp;
    }
    if (!detail::decode_utf8(t_, pos_, cp)) refuse(pos_, "invalid UTF-8");
    return cp;
  }

  Sequence string_literal() {
    const std::size_t open = pos_++;
    std::string bytes;
    while (true) {
      if (pos_ >= t_.size()) refuse(open, "unterminated string literal");
      if (t_[pos_] == '"') break;
      detail::append_utf8(bytes, character());
    }
    ++pos_;
    return b_.literal(bytes);
  }

  CodeSet char_class() {
    const std::size_t open = pos_++;
    bool negated = false;
    if (pos_ < t_.size() && t_[pos_] == '^') negated = true, ++pos_;
    CodeSet set;
    while (true) {
      if (pos_ >= t_.size()) refuse(open, "unterminated character class");
      if (t_[pos_] == ']') break;
      const std::size_t start = pos_;
      const uint32_t lo = character();
      if (pos_ + 1 < t_.size() && t_[pos_] == '-' && t_[pos_ + 1] != ']') {
        ++pos_;
        const uint32_t hi = character();
        if (hi < lo) refuse(start, "range out of order in character class");
        set.add_range(lo, hi);
      } else {
        set.add(lo);
      }
    }
    ++pos_;
    return negated ? set.complement() : set;
  }

  Builder& b_;
  std::string_view t_;
  std::size_t pos_ = 0;
  std::unordered_map<std::string, Entry> rules_;
};

}  // namespace

Grammar compile_gbnf(std::string_view text, const CompileLimits& limits) {
  Grammar grammar;
  detail::Builder builder(grammar, limits);
  grammar.set_start(GbnfParser(builder, text).parse());
  grammar.validate();
  return grammar;
}

}  // namespace deepinfer::grammar

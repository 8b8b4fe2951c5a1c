// The Lark form llguidance takes (docs/syntax.md there) to a Grammar: rules `name: alternatives`
// (with Lark's ?name / !name modifiers and `-> alias`, which change trees, not the language),
// terminals `NAME: ...` (names without lowercase letters; they may use terminals, not rules),
// "literals" and "literals"i (ASCII case folding), "a".."z" ranges, /regex/ and /regex/s terminals
// (ECMAScript subset, anchored; `.` is anything but \n, or anything with s), [optional], (groups),
// * + ?, ~ n, ~ n..m, {n}, {n,}, {n,m}, {,m}, priorities (ignored: Earley over bytes has no lexer
// to prioritise), // and # comments. The start rule is `start`. Refused: every %directive
// (%ignore, %import, %json, ...), templates, rule attributes, special tokens <...>, @references,
// regex flags other than s.
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

bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9') || c == '-'; }

// Lark: a terminal's name has no lowercase letter (leading underscores aside).
bool is_terminal(std::string_view name) {
  const std::size_t first = name.find_first_not_of('_');
  if (first == std::string_view::npos || !(name[first] >= 'A' && name[first] <= 'Z')) return false;
  return std::none_of(name.begin(), name.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

class LarkParser {
 public:
  LarkParser(Builder& builder, std::string_view text) : b_(builder), t_(text) {}

  RuleId parse() {
    pos_ = space(pos_, true);
    while (pos_ < t_.size()) {
      if (t_[pos_] == '%') directive(pos_);
      if (t_[pos_] == '?' || t_[pos_] == '!') ++pos_;  // tree-shaping modifiers
      const std::size_t name_at = pos_;
      const std::string name = read_name();
      if (name.empty()) refuse(pos_, "expected a rule or terminal definition");
      if (pos_ < t_.size() && t_[pos_] == '.') {  // a priority
        ++pos_;
        if (pos_ < t_.size() && t_[pos_] == '-') ++pos_;
        const std::size_t digits = pos_;
        while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') ++pos_;
        if (pos_ == digits) refuse(digits, "expected a priority after '.'");
      }
      if (pos_ < t_.size() && t_[pos_] == '{') refuse(pos_, "templates are not supported");
      if (pos_ < t_.size() && t_[pos_] == '[') refuse(pos_, "rule attributes [...] are not supported");
      pos_ = space(pos_, false);
      if (pos_ >= t_.size() || t_[pos_] != ':') refuse(pos_, "expected ':' after '" + name + "'");
      ++pos_;
      Entry& entry = lookup(name, name_at);
      if (entry.defined) refuse(name_at, "'" + name + "' is defined twice");
      entry.defined = true;
      in_terminal_ = is_terminal(name);
      current_ = name;
      alternates(0, false, entry.id);
      if (pos_ < t_.size() && (t_[pos_] == ')' || t_[pos_] == ']'))
        refuse(pos_, std::string("unmatched '") + t_[pos_] + "'");
      pos_ = space(pos_, true);
    }
    const Entry* missing = nullptr;
    std::string missing_name;
    for (const auto& [name, entry] : rules_) {
      if (!entry.defined && (!missing || entry.first_use < missing->first_use)) {
        missing = &entry;
        missing_name = name;
      }
    }
    if (missing) refuse(missing->first_use, "undefined " + std::string(is_terminal(missing_name) ? "terminal" : "rule") +
                                                " '" + missing_name + "'");
    const auto start = rules_.find("start");
    if (start == rules_.end()) refuse(0, "no rule named 'start' (the start rule)");
    return start->second.id;
  }

 private:
  struct Entry {
    RuleId id;
    bool defined = false;
    std::size_t first_use;
  };

  [[noreturn]] void directive(std::size_t at) {
    std::size_t end = at + 1;
    while (end < t_.size() && name_char(t_[end])) ++end;
    refuse(at, "directive " + std::string(t_.substr(at, end - at)) + " is not supported");
  }

  Entry& lookup(const std::string& name, std::size_t at) {
    auto found = rules_.find(name);
    if (found == rules_.end()) found = rules_.emplace(name, Entry{b_.rule(name), false, at}).first;
    return found->second;
  }

  std::size_t space(std::size_t pos, bool newlines) const {
    return detail::skip_space(t_, pos, newlines, "//", "#");
  }

  std::string read_name() {
    const std::size_t start = pos_;
    if (pos_ < t_.size() && name_start(t_[pos_]))
      while (pos_ < t_.size() && name_char(t_[pos_]) && !t_.substr(pos_).starts_with("->")) ++pos_;
    return std::string(t_.substr(start, pos_ - start));
  }

  // A definition (or a directive) starts at i: [?!]name[.priority][{...}|[...]] ':'.
  bool definition_at(std::size_t i) const {
    if (i < t_.size() && t_[i] == '%') return true;
    if (i < t_.size() && (t_[i] == '?' || t_[i] == '!')) ++i;
    if (i >= t_.size() || !name_start(t_[i])) return false;
    while (i < t_.size() && name_char(t_[i])) ++i;
    if (i < t_.size() && t_[i] == '.') {
      ++i;
      if (i < t_.size() && t_[i] == '-') ++i;
      while (i < t_.size() && t_[i] >= '0' && t_[i] <= '9') ++i;
    }
    if (i < t_.size() && (t_[i] == '{' || t_[i] == '[')) {
      const char close = t_[i] == '{' ? '}' : ']';
      while (i < t_.size() && t_[i] != close && t_[i] != '\n') ++i;
      if (i >= t_.size() || t_[i] != close) return false;
      ++i;
    }
    i = space(i, false);
    return i < t_.size() && t_[i] == ':';
  }

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
        // A newline outside a group ends the definition when another one (or the end) follows.
        const std::size_t next = space(pos_, true);
        pos_ = next;
        if (next >= t_.size() || definition_at(next)) break;
        continue;
      }
      if (pos_ >= t_.size()) break;
      const char c = t_[pos_];
      if (c == '|' || c == ')' || c == ']') break;
      if (t_.substr(pos_).starts_with("->")) {  // an alias names the tree node only
        pos_ = space(pos_ + 2, false);
        if (read_name().empty()) refuse(pos_, "expected an alias name after '->'");
        continue;
      }
      const std::size_t start = pos_;
      Sequence item = element(depth);
      while (true) {
        const std::size_t op = space(pos_, nested);
        if (op >= t_.size()) break;
        int64_t min = 0, max = 0;
        const char o = t_[op];
        if (o == '*') {
          min = 0, max = -1, pos_ = op + 1;
        } else if (o == '+') {
          min = 1, max = -1, pos_ = op + 1;
        } else if (o == '?') {
          min = 0, max = 1, pos_ = op + 1;
        } else if (o == '~') {
          pos_ = space(op + 1, nested);
          min = max = number("expected a count after '~'");
          if (t_.substr(pos_).starts_with("..")) {
            pos_ += 2;
            max = number("expected a count after '..'");
          }
          if (min > max) refuse(op, "repetition ~ n..m with n above m");
        } else if (o == '{') {
          pos_ = op;
          braces(min, max);
        } else {
          break;
        }
        b_.check_repeat(min, max, op);
        item = b_.repeat(std::move(item), min, max, start);
      }
      b_.check_room(static_cast<int64_t>(seq.size() + item.size()), start);
      seq.insert(seq.end(), item.begin(), item.end());
    }
    return seq;
  }

  int64_t number(const char* missing) {
    const std::size_t begin = pos_;
    int64_t value = 0;
    while (pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9') {
      value = std::min(int64_t{1} << 40, value * 10 + (t_[pos_] - '0'));
      ++pos_;
    }
    if (pos_ == begin) refuse(begin, missing);
    return value;
  }

  // {n} {n,} {n,m} {,m} at pos_.
  void braces(int64_t& min, int64_t& max) {
    const std::size_t open = pos_++;
    pos_ = space(pos_, true);
    const bool has_min = pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9';
    min = has_min ? number("") : 0;
    max = min;
    pos_ = space(pos_, true);
    if (pos_ < t_.size() && t_[pos_] == ',') {
      pos_ = space(pos_ + 1, true);
      max = pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9' ? number("") : -1;
      pos_ = space(pos_, true);
    } else if (!has_min) {
      refuse(open, "malformed repetition {...}");
    }
    if (pos_ >= t_.size() || t_[pos_] != '}') refuse(open, "malformed repetition {...}");
    ++pos_;
  }

  Sequence element(int depth) {
    const std::size_t start = pos_;
    const char c = t_[pos_];
    if (c == '"') return string_element();
    if (c == '/') return regex_element();
    if (c == '(' || c == '[') {
      if (depth + 1 > b_.limits().max_depth)
        refuse(start, str_cat("groups nested deeper than ", b_.limits().max_depth));
      const char close = c == '(' ? ')' : ']';
      ++pos_;
      Sequence inner = alternates(depth + 1, true);
      pos_ = space(pos_, true);
      if (pos_ >= t_.size() || t_[pos_] != close)
        refuse(start, std::string("unterminated group: missing '") + close + "'");
      ++pos_;
      return c == '[' ? b_.repeat(std::move(inner), 0, 1, start) : inner;
    }
    if (name_start(c)) {
      const std::string name = read_name();
      if (in_terminal_ && !is_terminal(name))
        refuse(start, "terminal " + current_ + " uses rule '" + name + "' (terminals may use terminals only)");
      return {Grammar::rule(lookup(name, start).id)};
    }
    if (c == '%') directive(start);
    if (c == '<') refuse(start, "special tokens <...> are not supported");
    if (c == '@') refuse(start, "grammar references @... are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '~' || c == '{') refuse(start, "nothing to repeat");
    refuse(start, std::string("unexpected character '") + c + "'");
  }

  // "..." at pos_: its code points.
  std::u32string string_body() {
    const std::size_t open = pos_++;
    std::u32string out;
    while (true) {
      if (pos_ >= t_.size() || t_[pos_] == '\n' || t_[pos_] == '\r') refuse(open, "unterminated string literal");
      if (t_[pos_] == '"') break;
      uint32_t cp = 0;
      if (t_[pos_] == '\\') {
        const std::size_t backslash = pos_++;
        detail::EscapeOptions options;
        options.long_u = true;
        options.braced_u = false;
        if (pos_ >= t_.size() || !detail::parse_char_escape(t_, pos_, cp, 0, options))
          refuse(backslash, "bad escape in string literal");
      } else if (!detail::decode_utf8(t_, pos_, cp)) {
        refuse(pos_, "invalid UTF-8");
      }
      out += static_cast<char32_t>(cp);
    }
    ++pos_;
    return out;
  }

  Sequence string_element() {
    const std::size_t start = pos_;
    const std::u32string chars = string_body();
    if (pos_ < t_.size() && t_[pos_] == 'i' && !(pos_ + 1 < t_.size() && name_char(t_[pos_ + 1]))) {
      ++pos_;
      Sequence seq;
      for (char32_t cp : chars) {
        if (cp >= 0x80) refuse(start, "case-insensitive literals must be ASCII");
        ByteSet set = ByteSet::of(static_cast<uint8_t>(cp));
        if (cp >= 'a' && cp <= 'z') set.add(static_cast<uint8_t>(cp - 'a' + 'A'));
        if (cp >= 'A' && cp <= 'Z') set.add(static_cast<uint8_t>(cp - 'A' + 'a'));
        seq.push_back(b_.bytes(set));
      }
      return seq;
    }
    const std::size_t after = space(pos_, false);
    if (t_.substr(after).starts_with("..")) {
      // "a".."z": one code point of the range.
      pos_ = space(after + 2, false);
      if (pos_ >= t_.size() || t_[pos_] != '"') refuse(pos_, "expected a literal after '..'");
      const std::u32string last = string_body();
      if (chars.size() != 1 || last.size() != 1) refuse(start, "a literal range needs one character on each side");
      if (last[0] < chars[0]) refuse(start, "literal range out of order");
      return b_.code_set(CodeSet::range(chars[0], last[0]), start);
    }
    std::string bytes;
    for (char32_t cp : chars) detail::append_utf8(bytes, cp);
    return b_.literal(bytes);
  }

  Sequence regex_element() {
    const std::size_t open = pos_++;
    const std::size_t body = pos_;
    while (true) {
      if (pos_ >= t_.size() || t_[pos_] == '\n') refuse(open, "unterminated regex /.../");
      if (t_[pos_] == '/') break;
      if (t_[pos_] == '\\') ++pos_;
      ++pos_;
    }
    const std::string_view pattern = t_.substr(body, pos_ - body);
    ++pos_;
    detail::RegexOptions options;
    options.anchored = true;
    options.dot = detail::RegexOptions::Dot::no_newline;
    options.base = body;
    while (pos_ < t_.size() && name_char(t_[pos_])) {
      if (t_[pos_] == 's') {
        options.dot = detail::RegexOptions::Dot::all;
      } else {
        refuse(pos_, std::string("regex flag '") + t_[pos_] + "' is not supported");
      }
      ++pos_;
    }
    return {Grammar::rule(detail::compile_regex_into(b_, pattern, options))};
  }

  Builder& b_;
  std::string_view t_;
  std::size_t pos_ = 0;
  std::unordered_map<std::string, Entry> rules_;
  bool in_terminal_ = false;
  std::string current_;
};

}  // namespace

Grammar compile_lark(std::string_view text, const CompileLimits& limits) {
  Grammar grammar;
  detail::Builder builder(grammar, limits);
  grammar.set_start(LarkParser(builder, text).parse());
  grammar.validate();
  return grammar;
}

}  // namespace deepinfer::grammar

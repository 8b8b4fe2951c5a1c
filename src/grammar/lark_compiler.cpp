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

#include "grammar/compile.h"
#include "grammar/compile_util.h"
#include "grammar/ebnf_parser.h"

namespace deepinfer::grammar {

namespace {

using detail::CodeSet;
using detail::refuse;

// // and # comments; escapes include \UHHHHHHHH but not \u{...}; a literal ends on its line.
const detail::EbnfSyntax kLarkSyntax = {.comment = "//",
                                        .other_comment = "#",
                                        .escapes = {.long_u = true, .braced_u = false},
                                        .bad_escape_reason = "bad escape in string literal",
                                        .literals_span_lines = false};

bool name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool name_char(char c) { return name_start(c) || (c >= '0' && c <= '9') || c == '-'; }

// Lark: a terminal's name has no lowercase letter (leading underscores aside).
bool is_terminal(std::string_view name) {
  const std::size_t first = name.find_first_not_of('_');
  if (first == std::string_view::npos || !(name[first] >= 'A' && name[first] <= 'Z')) return false;
  return std::none_of(name.begin(), name.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

class LarkParser final : public detail::EbnfParser {
 public:
  LarkParser(detail::Builder& builder, std::string_view text) : EbnfParser(builder, text, kLarkSyntax) {}

  RuleId parse() {
    pos_ = space(pos_, true);
    while (pos_ < text_.size()) {
      if (text_[pos_] == '%') directive(pos_);
      if (text_[pos_] == '?' || text_[pos_] == '!') ++pos_;  // tree-shaping modifiers
      const std::size_t name_at = pos_;
      const std::string name = read_name();
      if (name.empty()) refuse(pos_, "expected a rule or terminal definition");
      if (pos_ < text_.size() && text_[pos_] == '.') {  // a priority
        ++pos_;
        if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
        const std::size_t digits = pos_;
        while (digit_at(pos_)) ++pos_;
        if (pos_ == digits) refuse(digits, "expected a priority after '.'");
      }
      if (pos_ < text_.size() && text_[pos_] == '{') refuse(pos_, "templates are not supported");
      if (pos_ < text_.size() && text_[pos_] == '[') refuse(pos_, "rule attributes [...] are not supported");
      pos_ = space(pos_, false);
      if (pos_ >= text_.size() || text_[pos_] != ':') refuse(pos_, "expected ':' after '" + name + "'");
      ++pos_;
      in_terminal_ = is_terminal(name);
      current_ = name;
      definition(name, name_at, "'" + name + "' is defined twice");
    }
    if (const auto undefined = first_undefined())
      refuse(undefined->first_use, "undefined " + std::string(is_terminal(undefined->name) ? "terminal" : "rule") +
                                       " '" + undefined->name + "'");
    return start_rule("start");
  }

 private:
  [[noreturn]] void directive(std::size_t at) {
    std::size_t end = at + 1;
    while (end < text_.size() && name_char(text_[end])) ++end;
    refuse(at, "directive " + std::string(text_.substr(at, end - at)) + " is not supported");
  }

  std::string read_name() {
    const std::size_t start = pos_;
    if (pos_ < text_.size() && name_start(text_[pos_]))
      while (pos_ < text_.size() && name_char(text_[pos_]) && !text_.substr(pos_).starts_with("->")) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // A definition (or a directive) starts at pos: [?!]name[.priority][{...}|[...]] ':'.
  bool definition_at(std::size_t pos) const override {
    if (pos < text_.size() && text_[pos] == '%') return true;
    if (pos < text_.size() && (text_[pos] == '?' || text_[pos] == '!')) ++pos;
    if (pos >= text_.size() || !name_start(text_[pos])) return false;
    while (pos < text_.size() && name_char(text_[pos])) ++pos;
    if (pos < text_.size() && text_[pos] == '.') {
      ++pos;
      if (pos < text_.size() && text_[pos] == '-') ++pos;
      while (digit_at(pos)) ++pos;
    }
    if (pos < text_.size() && (text_[pos] == '{' || text_[pos] == '[')) {
      const char close = text_[pos] == '{' ? '}' : ']';
      while (pos < text_.size() && text_[pos] != close && text_[pos] != '\n') ++pos;
      if (pos >= text_.size() || text_[pos] != close) return false;
      ++pos;
    }
    pos = space(pos, false);
    return pos < text_.size() && text_[pos] == ':';
  }

  // [...] is an optional group.
  bool closing_bracket(char c) const override { return c == ')' || c == ']'; }

  // An alias names the tree node only.
  bool skip_annotation() override {
    if (!text_.substr(pos_).starts_with("->")) return false;
    pos_ = space(pos_ + 2, false);
    if (read_name().empty()) refuse(pos_, "expected an alias name after '->'");
    return true;
  }

  // Beside the common operators, ~ n and ~ n..m. A count above the limit blames the operator,
  // whichever it is.
  bool repetition_operator(std::size_t op, bool nested, int64_t& min, int64_t& max) override {
    if (text_[op] == '~') {
      tilde_counts(op, nested, min, max);
    } else if (!EbnfParser::repetition_operator(op, nested, min, max)) {
      return false;
    }
    builder_.check_repeat(min, max, op);
    return true;
  }

  // ~ n or ~ n..m at `op`.
  void tilde_counts(std::size_t op, bool nested, int64_t& min, int64_t& max) {
    pos_ = space(op + 1, nested);
    min = max = count("expected a count after '~'");
    if (text_.substr(pos_).starts_with("..")) {
      pos_ += 2;
      max = count("expected a count after '..'");
    }
    if (min > max) refuse(op, "repetition ~ n..m with n above m");
  }

  Sequence element(int depth) override {
    const std::size_t start = pos_;
    const char c = text_[pos_];
    if (c == '"') return string_element();
    if (c == '/') return regex_element();
    if (c == '(') return group(depth, ')');
    if (c == '[') return builder_.repeat(group(depth, ']'), 0, 1, start);
    if (name_start(c)) {
      const std::string name = read_name();
      if (in_terminal_ && !is_terminal(name))
        refuse(start, "terminal " + current_ + " uses rule '" + name + "' (terminals may use terminals only)");
      return reference(name, start);
    }
    if (c == '%') directive(start);
    if (c == '<') refuse(start, "special tokens <...> are not supported");
    if (c == '@') refuse(start, "grammar references @... are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '~' || c == '{') refuse(start, "nothing to repeat");
    refuse(start, std::string("unexpected character '") + c + "'");
  }

  // "..." with Lark's suffixes: "..."i (ASCII case folding) and "a".."z" (a range).
  Sequence string_element() {
    const std::size_t start = pos_;
    const std::u32string chars = quoted_literal();
    if (pos_ < text_.size() && text_[pos_] == 'i' && !(pos_ + 1 < text_.size() && name_char(text_[pos_ + 1]))) {
      ++pos_;
      Sequence seq;
      for (char32_t cp : chars) {
        if (cp >= 0x80) refuse(start, "case-insensitive literals must be ASCII");
        ByteSet set = ByteSet::of(static_cast<uint8_t>(cp));
        if (cp >= 'a' && cp <= 'z') set.add(static_cast<uint8_t>(cp - 'a' + 'A'));
        if (cp >= 'A' && cp <= 'Z') set.add(static_cast<uint8_t>(cp - 'A' + 'a'));
        seq.push_back(builder_.bytes(set));
      }
      return seq;
    }
    const std::size_t after = space(pos_, false);
    if (text_.substr(after).starts_with("..")) {
      // "a".."z": one code point of the range.
      pos_ = space(after + 2, false);
      if (pos_ >= text_.size() || text_[pos_] != '"') refuse(pos_, "expected a literal after '..'");
      const std::u32string last = quoted_literal();
      if (chars.size() != 1 || last.size() != 1) refuse(start, "a literal range needs one character on each side");
      if (last[0] < chars[0]) refuse(start, "literal range out of order");
      return builder_.code_set(CodeSet::range(chars[0], last[0]), start);
    }
    return literal(chars);
  }

  Sequence regex_element() {
    const std::size_t open = pos_++;
    const std::size_t body = pos_;
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') refuse(open, "unterminated regex /.../");
      if (text_[pos_] == '/') break;
      if (text_[pos_] == '\\') ++pos_;
      ++pos_;
    }
    const std::string_view pattern = text_.substr(body, pos_ - body);
    ++pos_;
    detail::RegexOptions options;
    options.anchored = true;
    options.dot = detail::RegexOptions::Dot::no_newline;
    options.base = body;
    while (pos_ < text_.size() && name_char(text_[pos_])) {
      if (text_[pos_] == 's') {
        options.dot = detail::RegexOptions::Dot::all;
      } else {
        refuse(pos_, std::string("regex flag '") + text_[pos_] + "' is not supported");
      }
      ++pos_;
    }
    return {Grammar::rule(detail::compile_regex_into(builder_, pattern, options))};
  }

  bool in_terminal_ = false;
  std::string current_;
};

}  // namespace

Grammar compile_lark(std::string_view text, const CompileLimits& limits) {
  return detail::compile_ebnf<LarkParser>(text, limits);
}

}  // namespace deepinfer::grammar

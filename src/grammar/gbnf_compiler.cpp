// llama.cpp's GBNF (grammars/README.md) to a Grammar: `name ::= alternatives`, "literals",
// [classes] and [^negated] ones over code points, `.`, (groups), rule references (recursion, left
// recursion included), the postfix operators * + ? {n} {n,} {n,m} (and {,m}), # comments. A rule
// ends where the next `name ::=` begins (llama.cpp ends it at a newline outside a group unless
// the line ends with '|'; every grammar it takes reads the same here). The start rule is `root`.
#include <string>

#include "grammar/compile.h"
#include "grammar/compile_util.h"
#include "grammar/ebnf_parser.h"

namespace deepinfer::grammar {

namespace {

using detail::CodeSet;
using detail::refuse;

// # comments; escapes include \UHHHHHHHH and \u{...}; a literal may hold a raw newline.
const detail::EbnfSyntax kGbnfSyntax = {.comment = "#", .escapes = {.long_u = true}};

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class GbnfParser final : public detail::EbnfParser {
 public:
  GbnfParser(detail::Builder& builder, std::string_view text) : EbnfParser(builder, text, kGbnfSyntax) {}

  RuleId parse() {
    pos_ = space(pos_, true);
    while (pos_ < text_.size()) {
      const std::size_t name_at = pos_;
      const std::string name = read_name();
      if (name.empty()) refuse(pos_, "expected a rule name");
      pos_ = space(pos_, false);
      if (!text_.substr(pos_).starts_with("::=")) refuse(pos_, "expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      definition(name, name_at, "rule '" + name + "' is defined twice");
    }
    if (const auto undefined = first_undefined()) refuse(undefined->first_use, "undefined rule '" + undefined->name + "'");
    return start_rule("root");
  }

 private:
  std::string read_name() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // `name ::=` at pos (after spaces)?
  bool definition_at(std::size_t pos) const override {
    const std::size_t start = pos;
    while (pos < text_.size() && name_char(text_[pos])) ++pos;
    if (pos == start) return false;
    pos = space(pos, false);
    return text_.substr(pos).starts_with("::=");
  }

  Sequence element(int depth) override {
    const std::size_t start = pos_;
    const char c = text_[pos_];
    if (c == '"') return literal(quoted_literal());
    if (c == '[') return builder_.code_set(char_class(), start);
    if (c == '.') {
      ++pos_;
      return builder_.code_set(CodeSet::any(), start);
    }
    if (c == '(') return group(depth, ')');
    if (name_char(c)) return reference(read_name(), start);
    if (c == '<' || c == '!') refuse(start, "token references (<...>, !<...>) are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{') refuse(start, "nothing to repeat");
    refuse(start, std::string("unexpected character '") + c + "'");
  }

  CodeSet char_class() {
    const std::size_t open = pos_++;
    bool negated = false;
    if (pos_ < text_.size() && text_[pos_] == '^') negated = true, ++pos_;
    CodeSet set;
    while (true) {
      if (pos_ >= text_.size()) refuse(open, "unterminated character class");
      if (text_[pos_] == ']') break;
      const std::size_t start = pos_;
      const uint32_t lo = character();
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
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
};

}  // namespace

Grammar compile_gbnf(std::string_view text, const CompileLimits& limits) {
  return detail::compile_ebnf<GbnfParser>(text, limits);
}

}  // namespace deepinfer::grammar

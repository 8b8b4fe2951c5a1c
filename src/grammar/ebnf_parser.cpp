#include "grammar/ebnf_parser.h"

#include <algorithm>

namespace deepinfer::grammar::detail {

bool EbnfParser::repetition_operator(std::size_t op, bool /*nested*/, int64_t& min, int64_t& max) {
  switch (text_[op]) {
    case '*':
      min = 0, max = -1;
      break;
    case '+':
      min = 1, max = -1;
      break;
    case '?':
      min = 0, max = 1;
      break;
    case '{':
      pos_ = op;
      braces(min, max);
      return true;
    default:
      return false;
  }
  pos_ = op + 1;
  return true;
}

void EbnfParser::definition(const std::string& name, std::size_t name_at, const std::string& defined_twice_reason) {
  Entry& entry = lookup(name, name_at);
  if (entry.defined) refuse(name_at, defined_twice_reason);
  entry.defined = true;
  alternates(0, false, entry.id);
  if (pos_ < text_.size() && closing_bracket(text_[pos_]))
    refuse(pos_, std::string("unmatched '") + text_[pos_] + "'");
  pos_ = space(pos_, true);
}

Sequence EbnfParser::reference(const std::string& name, std::size_t at) { return {Grammar::rule(lookup(name, at).id)}; }

std::optional<EbnfParser::UndefinedRule> EbnfParser::first_undefined() const {
  std::optional<UndefinedRule> first;
  for (const auto& [name, entry] : rules_)
    if (!entry.defined && (!first || entry.first_use < first->first_use)) first = UndefinedRule{name, entry.first_use};
  return first;
}

RuleId EbnfParser::start_rule(const std::string& name) const {
  const auto start = rules_.find(name);
  if (start == rules_.end()) refuse(0, "no rule named '" + name + "' (the start rule)");
  return start->second.id;
}

EbnfParser::Entry& EbnfParser::lookup(const std::string& name, std::size_t at) {
  auto found = rules_.find(name);
  if (found == rules_.end()) found = rules_.emplace(name, Entry{builder_.rule(name), false, at}).first;
  return found->second;
}

std::size_t EbnfParser::space(std::size_t pos, bool newlines) const {
  return skip_space(text_, pos, newlines, syntax_.comment, syntax_.other_comment);
}

Sequence EbnfParser::alternates(int depth, bool nested, RuleId target) {
  const std::size_t start = pos_;
  Sequence first = sequence(depth, nested);
  if (target < 0 && (pos_ >= text_.size() || text_[pos_] != '|')) return first;
  const RuleId rule = target >= 0 ? target : builder_.rule("group");
  builder_.alt(rule, std::move(first), start);
  while (pos_ < text_.size() && text_[pos_] == '|') {
    ++pos_;
    const std::size_t at = pos_;
    builder_.alt(rule, sequence(depth, nested), at);
  }
  return {Grammar::rule(rule)};
}

Sequence EbnfParser::sequence(int depth, bool nested) {
  Sequence seq;
  while (true) {
    pos_ = space(pos_, nested);
    if (!nested && pos_ < text_.size() && (text_[pos_] == '\n' || text_[pos_] == '\r')) {
      pos_ = space(pos_, true);
      if (pos_ >= text_.size() || definition_at(pos_)) break;
      continue;
    }
    if (pos_ >= text_.size()) break;  // in a group, the group reports its missing bracket
    const char c = text_[pos_];
    if (c == '|' || closing_bracket(c)) break;
    if (skip_annotation()) continue;
    const std::size_t start = pos_;
    Sequence item = element(depth);
    // Postfix operators, each applying to all that precedes it: "a"*? is ("a"*)?.
    while (true) {
      const std::size_t op = space(pos_, nested);
      if (op >= text_.size()) break;
      int64_t min = 0, max = 0;
      if (!repetition_operator(op, nested, min, max)) break;
      item = builder_.repeat(std::move(item), min, max, start);
    }
    builder_.check_room(static_cast<int64_t>(seq.size() + item.size()), start);
    seq.insert(seq.end(), item.begin(), item.end());
  }
  return seq;
}

Sequence EbnfParser::group(int depth, char close) {
  const std::size_t open = pos_;
  if (depth + 1 > builder_.limits().max_depth)
    refuse(open, str_cat("groups nested deeper than ", builder_.limits().max_depth));
  ++pos_;
  Sequence inner = alternates(depth + 1, true);
  pos_ = space(pos_, true);
  if (pos_ >= text_.size() || text_[pos_] != close)
    refuse(open, std::string("unterminated group: missing '") + close + "'");
  ++pos_;
  return inner;
}

int64_t EbnfParser::count(const char* missing_reason) {
  const std::size_t begin = pos_;
  int64_t value = 0;
  while (digit_at(pos_)) {
    value = std::min(int64_t{1} << 40, value * 10 + (text_[pos_] - '0'));
    ++pos_;
  }
  if (pos_ == begin) refuse(begin, missing_reason);
  return value;
}

void EbnfParser::braces(int64_t& min, int64_t& max) {
  const std::size_t open = pos_++;
  pos_ = space(pos_, true);
  const bool has_min = digit_at(pos_);
  min = has_min ? count("") : 0;
  max = min;
  pos_ = space(pos_, true);
  if (pos_ < text_.size() && text_[pos_] == ',') {
    pos_ = space(pos_ + 1, true);
    max = digit_at(pos_) ? count("") : -1;
    pos_ = space(pos_, true);
  } else if (!has_min) {
    refuse(open, "malformed repetition {...}");
  }
  if (pos_ >= text_.size() || text_[pos_] != '}') refuse(open, "malformed repetition {...}");
  ++pos_;
  builder_.check_repeat(min, max, open);
}

uint32_t EbnfParser::character() {
  uint32_t cp = 0;
  if (text_[pos_] == '\\') {
    const std::size_t backslash = pos_++;
    if (pos_ >= text_.size() || !parse_char_escape(text_, pos_, cp, 0, syntax_.escapes))
      refuse(backslash, syntax_.bad_escape_reason);
    return cp;
  }
  if (!decode_utf8(text_, pos_, cp)) refuse(pos_, "invalid UTF-8");
  return cp;
}

std::u32string EbnfParser::quoted_literal() {
  const std::size_t open = pos_++;
  std::u32string out;
  while (true) {
    const bool at_line_end = pos_ < text_.size() && (text_[pos_] == '\n' || text_[pos_] == '\r');
    if (pos_ >= text_.size() || (at_line_end && !syntax_.literals_span_lines))
      refuse(open, "unterminated string literal");
    if (text_[pos_] == '"') break;
    out += static_cast<char32_t>(character());
  }
  ++pos_;
  return out;
}

Sequence EbnfParser::literal(const std::u32string& code_points) {
  std::string bytes;
  for (const char32_t cp : code_points) append_utf8(bytes, cp);
  return builder_.literal(bytes);
}

}  // namespace deepinfer::grammar::detail

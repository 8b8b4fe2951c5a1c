#pragma once
// The parsing that the EBNF-like constraint languages (GBNF, Lark) have in common: rules defined
// in any order and referenced before their definition, alternatives and sequences, groups,
// the postfix operators * + ? {n} {n,} {n,m} {,m}, and quoted literals. A compiler derives from
// EbnfParser and keeps its own syntax in view: its lexical details in an EbnfSyntax, how names
// and definitions look, its own elements, and any operators of its own. Not a public API.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "grammar/compile.h"
#include "grammar/compile_util.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar::detail {

struct EbnfSyntax {
  // Line comments start with either of these (an empty one: none).
  std::string_view comment;
  std::string_view other_comment = {};
  // The escapes of "..." literals (and of GBNF's [...] classes).
  EscapeOptions escapes;
  const char* bad_escape_reason = "bad escape";
  // Whether a literal may hold a raw newline (else the newline is taken for an unclosed literal).
  bool literals_span_lines = true;
};

class EbnfParser {
 public:
  virtual ~EbnfParser() = default;

 protected:
  EbnfParser(Builder& builder, std::string_view text, const EbnfSyntax& syntax)
      : builder_(builder), text_(text), syntax_(syntax) {}

  // ---- what each language says for itself
  // A newline outside a group ends the definition being read only when the next definition (or
  // anything else that cannot continue it, like a Lark directive) starts at `pos`.
  virtual bool definition_at(std::size_t pos) const = 0;
  // One element at pos_: where a sequence has neither ended nor met a repetition operator.
  virtual Sequence element(int depth) = 0;
  // The brackets that close a group; one met outside any group is unmatched.
  virtual bool closing_bracket(char c) const { return c == ')'; }
  // Skips what may stand between elements without adding to the language (Lark's `-> alias`);
  // false when there is none at pos_.
  virtual bool skip_annotation() { return false; }
  // A postfix repetition operator at `op`: sets min and max (max < 0: unbounded), moves pos_
  // past it and returns true; false when `op` holds none. A count of {...} above the limit is
  // refused here, blaming the brace; one of * + ? when the operator is applied, blaming the element.
  virtual bool repetition_operator(std::size_t op, bool nested, int64_t& min, int64_t& max);

  // ---- rules
  // The definition of `name` (its name at `name_at`, pos_ after its ':' or '::='): its
  // alternatives up to where the next definition begins. A second definition of the same name
  // is refused with `defined_twice_reason`.
  void definition(const std::string& name, std::size_t name_at, const std::string& defined_twice_reason);
  // A reference to the rule `name`, which may be defined later (`at` is blamed when it never is).
  Sequence reference(const std::string& name, std::size_t at);
  struct UndefinedRule {
    std::string name;
    std::size_t first_use;
  };
  // The rule referenced but never defined that the text uses first.
  std::optional<UndefinedRule> first_undefined() const;
  // The rule the grammar starts from; refused when the text does not define it.
  RuleId start_rule(const std::string& name) const;

  // ---- structure
  std::size_t space(std::size_t pos, bool newlines) const;
  // Alternatives up to a closing bracket or the end of the definition: into `target` when given
  // (the rule being defined), else one sequence when there is a single alternative, or a new rule.
  Sequence alternates(int depth, bool nested, RuleId target = -1);
  // A group at pos_ (its opening bracket), closed by `close`.
  Sequence group(int depth, char close);

  // ---- lexing
  bool digit_at(std::size_t pos) const { return pos < text_.size() && text_[pos] >= '0' && text_[pos] <= '9'; }
  // The decimal count at pos_, refused with `missing_reason` when no digit is there. It saturates
  // far above any repetition limit, so a huge count is refused as too large, never overflowed.
  int64_t count(const char* missing_reason);
  // One character of a literal or class at pos_: an escape or a UTF-8 code point.
  uint32_t character();
  // The code points of the "..." literal at pos_ (its opening quote); pos_ ends after it.
  std::u32string quoted_literal();
  // The literal matching exactly these code points' UTF-8.
  Sequence literal(const std::u32string& code_points);

  Builder& builder_;
  std::string_view text_;
  std::size_t pos_ = 0;

 private:
  struct Entry {
    RuleId id;
    bool defined = false;
    std::size_t first_use;
  };

  Entry& lookup(const std::string& name, std::size_t at);
  Sequence sequence(int depth, bool nested);
  // {n} {n,} {n,m} {,m} at pos_.
  void braces(int64_t& min, int64_t& max);

  EbnfSyntax syntax_;
  std::unordered_map<std::string, Entry> rules_;
};

// A grammar parsed by `Parser` (an EbnfParser with a constructor (Builder&, text) and
// RuleId parse()), validated.
template <class Parser>
Grammar compile_ebnf(std::string_view text, const CompileLimits& limits) {
  Grammar grammar;
  Builder builder(grammar, limits);
  grammar.set_start(Parser(builder, text).parse());
  grammar.validate();
  return grammar;
}

}  // namespace deepinfer::grammar::detail

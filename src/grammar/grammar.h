#pragma once
// The one representation every constraint compiles to (regex, JSON schema, GBNF, Lark): a
// context-free grammar over bytes. A terminal is a set of bytes (one byte of output), a rule has
// alternatives, each a sequence of terminals and rules; the start rule's language is exactly the
// outputs the constraint allows. Bytes, not characters or tokens: tokens of the model's
// vocabulary cut UTF-8 sequences anywhere, and a byte-level grammar needs no lexer that could
// disagree with the tokenizer about where a token ends. The matcher (matcher.h) runs it.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::grammar {

// A set of byte values.
struct ByteSet {
  std::array<uint64_t, 4> words{};

  static ByteSet of(uint8_t byte);
  static ByteSet range(uint8_t first, uint8_t last);  // inclusive
  static ByteSet all();

  void add(uint8_t byte) { words[byte >> 6] |= uint64_t{1} << (byte & 63); }
  void add_range(uint8_t first, uint8_t last);
  void add(const ByteSet& other);
  bool contains(uint8_t byte) const { return (words[byte >> 6] >> (byte & 63)) & 1; }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  ByteSet complement() const;
  bool operator==(const ByteSet& other) const = default;
};

using RuleId = int32_t;

// One element of an alternative: one byte of a terminal set, or a rule.
struct Symbol {
  bool is_rule = false;
  int32_t index = 0;  // the rule's id, or the terminal's index (Grammar::terminal)
  bool operator==(const Symbol& other) const = default;
};

using Sequence = std::vector<Symbol>;

class Grammar {
 public:
  // A new rule with no alternatives yet; `name` is for messages and dumps.
  RuleId add_rule(std::string name);
  // Adds an alternative (an empty sequence: the rule matches the empty string).
  void add_alternative(RuleId rule, Sequence symbols);
  // The terminal matching one byte of `set` (interned: equal sets share an index).
  Symbol terminal(const ByteSet& set);
  static Symbol rule(RuleId id) { return {true, id}; }
  // The bytes of `text`, one terminal each.
  Sequence literal(std::string_view text);
  void set_start(RuleId rule) { start_ = rule; }
  // Counted copies of one rule: a string whose length is bounded is the same rule at each count
  // of characters (`to_min` characters before it may end, `to_max` before it must, -1: never).
  // Two rules of one family whose counts are both past h behave alike on the next h bytes, so a
  // mask, which looks one token ahead, is shared between them when no token is longer than h
  // (CompiledGrammar::mask_aliases). The rules of a family have alternatives alike, symbol by
  // symbol, but for rules of one family at the same place; the compilers that count promise it,
  // and mask_aliases checks it.
  struct Counted {
    int32_t family = -1;  // -1: not counted
    int64_t to_min = 0, to_max = -1;
    // Each count is one character of any string text (a free string's body): the rule takes
    // every plain-text path (text_slice.h) of up to to_max bytes, which the mask walk then need
    // not check.
    bool any_text = false;
  };
  int32_t add_counted_family() { return family_count_++; }
  void set_counted(RuleId rule, Counted counted) { rules_[static_cast<std::size_t>(rule)].counted = counted; }
  const Counted& counted(RuleId rule) const { return rules_[static_cast<std::size_t>(rule)].counted; }
  bool has_counted() const { return family_count_ > 0; }

  // What a compiler was asked to enforce and did not (a lenient JSON schema's keywords): `where`
  // is the place in the source (a JSON pointer), `what` the keyword and what became of it, and
  // `field` the request field the source came from, once the API names it. A grammar with none
  // enforces all of its source.
  struct Relaxation {
    std::string field;
    std::string where;
    std::string what;
    bool operator==(const Relaxation& other) const = default;
  };
  // Adds one (an equal one already listed is not repeated).
  void add_relaxation(Relaxation relaxation);
  const std::vector<Relaxation>& relaxations() const { return relaxations_; }
  // Names `field` as the source of the relaxations that name none yet.
  void name_relaxations(std::string_view field);

  // Copies `other`'s rules, terminals and relaxations (named `field` where they name none) into
  // this grammar (its start is ignored here) and returns the copy of other's start rule: how a
  // grammar is composed from compiled parts.
  RuleId include(const Grammar& other, std::string_view field = {});

  RuleId start() const { return start_; }
  int32_t rule_count() const { return static_cast<int32_t>(rules_.size()); }
  const std::string& rule_name(RuleId rule) const { return rules_[static_cast<std::size_t>(rule)].name; }
  const std::vector<Sequence>& alternatives(RuleId rule) const {
    return rules_[static_cast<std::size_t>(rule)].alternatives;
  }
  int32_t terminal_count() const { return static_cast<int32_t>(terminals_.size()); }
  const ByteSet& terminal_set(int32_t index) const { return terminals_[static_cast<std::size_t>(index)]; }
  // Symbols over every alternative: the measure compile bounds count.
  int64_t size() const { return size_; }
  // The memory it holds, estimated from its element counts: what CompileLimits::max_bytes bounds.
  int64_t bytes() const;

  // Throws deepinfer::Error when the start is unset, a rule has no alternative, or a symbol
  // names a rule or terminal that does not exist.
  void validate() const;
  // A readable dump (GBNF-like), for `deepinfer grammar --dump` and test failures.
  std::string to_string() const;

 private:
  struct Rule {
    std::string name;
    std::vector<Sequence> alternatives;
    Counted counted;
  };
  std::vector<Rule> rules_;
  std::vector<ByteSet> terminals_;
  std::vector<Relaxation> relaxations_;
  // Interning by a search of terminals_ would be quadratic in distinct sets (up to 32,640 ranges).
  std::map<std::array<uint64_t, 4>, int32_t> terminal_index_;
  RuleId start_ = -1;
  int32_t family_count_ = 0;
  int64_t size_ = 0;
  int64_t alternative_count_ = 0;
  int64_t name_bytes_ = 0;
};

}  // namespace deepinfer::grammar

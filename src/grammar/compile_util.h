#pragma once
// Internal pieces the constraint compilers share (regex, GBNF, Lark, JSON schema): sets of code
// points and their UTF-8 byte-range automaton, escape sequences, and a Grammar builder that
// enforces CompileLimits (size, repetition counts) and expands repetition. Not a public API.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grammar/compile.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar::detail {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// "at byte N", the `where` of a CompileError in a text source.
std::string at_byte(std::size_t offset);
[[noreturn]] void refuse(std::size_t offset, const std::string& reason);

// A set of Unicode scalar values (code points, surrogates D800-DFFF never members): sorted,
// disjoint, non-adjacent inclusive ranges.
class CodeSet {
 public:
  struct Range {
    uint32_t lo, hi;
    bool operator==(const Range&) const = default;
    bool operator<(const Range& o) const { return lo < o.lo || (lo == o.lo && hi < o.hi); }
  };

  static CodeSet of(uint32_t cp) { return range(cp, cp); }
  static CodeSet range(uint32_t lo, uint32_t hi);
  static CodeSet any();  // every scalar value
  void add(uint32_t cp) { add_range(cp, cp); }
  void add_range(uint32_t lo, uint32_t hi);
  void add(const CodeSet& other);
  CodeSet complement() const;  // within the scalar values
  bool empty() const { return ranges_.empty(); }
  bool contains(uint32_t cp) const;
  bool ascii_only() const { return ranges_.empty() || ranges_.back().hi < 0x80; }
  const std::vector<Range>& ranges() const { return ranges_; }
  bool operator==(const CodeSet&) const = default;

 private:
  std::vector<Range> ranges_;
};

// ECMAScript's \d \w \s (ASCII digits and word characters; JavaScript's WhiteSpace and
// LineTerminator code points).
CodeSet digit_set();
CodeSet word_set();
CodeSet space_set();

void append_utf8(std::string& out, uint32_t cp);
// Decodes one well-formed UTF-8 code point at text[pos], advancing pos; false (pos unchanged) on
// an ill-formed or truncated sequence.
bool decode_utf8(std::string_view text, std::size_t& pos, uint32_t& cp);

// A byte-range sequence: bytes b0 in [r0.first, r0.second], then b1 in r1, ...
using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;
// The byte-range sequences whose union is exactly the UTF-8 encodings of the set's members
// (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF).
std::vector<ByteRanges> utf8_sequences(const CodeSet& set);

// A character escape after a backslash at text[pos] (pos at the character after '\'):
// n r t f v 0, xHH, uHHHH (a \uHHHH\uHHHH surrogate pair is one code point), u{H...},
// UHHHHHHHH, and an identity escape of ASCII punctuation. Returns false when text[pos] starts
// none of these (the caller then reports its own message); throws a CompileError on a
// malformed one (\x1, \u{110000}, a lone surrogate). `base` is added to offsets in messages.
struct EscapeOptions {
  bool long_u = false;     // \UHHHHHHHH (GBNF)
  bool braced_u = true;    // \u{...}
  bool nul = true;         // \0
};
bool parse_char_escape(std::string_view text, std::size_t& pos, uint32_t& cp, std::size_t base,
                       const EscapeOptions& options = {});

// Builds a Grammar within CompileLimits. Every alternative goes through alt(), which refuses a
// grammar above limits.max_symbols; repetition and code sets are expanded here, one way for all
// compilers.
class Builder {
 public:
  Builder(Grammar& grammar, const CompileLimits& limits);

  Grammar& grammar() { return grammar_; }
  const CompileLimits& limits() const { return limits_; }

  RuleId rule(std::string name) { return grammar_.add_rule(std::move(name)); }
  // Adds an alternative; `where`: the source offset blamed when the grammar grows too large.
  void alt(RuleId rule, Sequence symbols, std::size_t where);
  // Refuses when `pending` more symbols would take the grammar over the limit.
  void check_room(int64_t pending, std::size_t where) const;

  Symbol byte(uint8_t b);
  Symbol bytes(const ByteSet& set) { return grammar_.terminal(set); }
  Sequence literal(std::string_view text);
  // One code point of the set, as whole UTF-8 sequences (an empty set matches nothing).
  Sequence code_set(const CodeSet& set, std::size_t where);
  // A terminal that matches no byte (a rule with it as only alternative matches nothing).
  Symbol nothing() { return grammar_.terminal(ByteSet{}); }
  // The sequence as one symbol: itself when it is one symbol, else a new rule.
  Symbol as_symbol(Sequence sequence, std::size_t where, const char* name = "");
  // item{min,max} (max < 0: unbounded): x* is R -> x R | ε, x{n,m} n copies then a chain of
  // optional ones. Refuses counts above limits.max_repeat.
  Sequence repeat(Sequence item, int64_t min, int64_t max, std::size_t where);
  // A rule for a list of alternatives.
  Sequence choice(std::vector<Sequence> alternatives, std::size_t where, const char* name = "");
  // A copy of `other`'s rules in this grammar; returns the copy of its start rule.
  RuleId import(const Grammar& other, std::size_t where);

  // Refuses a repetition count above limits.max_repeat or min > max (max < 0: unbounded).
  void check_repeat(int64_t min, int64_t max, std::size_t where) const;

 private:
  Grammar& grammar_;
  CompileLimits limits_;
  std::vector<int32_t> byte_terminals_;
  std::map<std::vector<CodeSet::Range>, Symbol> code_sets_;
  std::map<std::pair<int32_t, int32_t>, Symbol> stars_;  // (is_rule, index) of x -> x*
};

// The regex compiler into an existing builder (the Lark compiler's /regex/ terminals, JSON
// Schema's `pattern`): the rule whose language is the pattern's (anchored as asked).
struct RegexOptions {
  bool anchored = true;
  // '.' matches: ECMAScript (all but \n \r U+2028 U+2029), or everything but \n (Python, Rust),
  // or everything (the s flag).
  enum class Dot { ecmascript, no_newline, all } dot = Dot::ecmascript;
  std::size_t base = 0;  // added to offsets in error messages
};
RuleId compile_regex_into(Builder& builder, std::string_view pattern, const RegexOptions& options);

// Skips spaces, tabs, newlines and comments starting with `comment` ("#", "//"); returns pos.
std::size_t skip_space(std::string_view text, std::size_t pos, bool newlines, std::string_view comment1,
                       std::string_view comment2 = {});

}  // namespace deepinfer::grammar::detail

#pragma once
// Internal to the JSON schema compiler: deterministic automata over bytes for the string-shaped
// parts of a schema (pattern, format, minLength/maxLength, property-name classes, bounded
// numbers). A schema needs what a context-free grammar cannot do by itself: intersect a pattern
// with a length bound or a format, and take the complement of a set of names (the keys
// additionalProperties may use are those no `properties` entry and no `patternProperties` regex
// claims). Automata do both exactly; emit_dfa() then turns one into Grammar rules.
//
// Every automaton here runs over the UTF-8 bytes of the DECODED string (the JSON value, not its
// escaped text); emit_dfa's json_string encoding writes each byte in the forms a JSON string may
// use for it.
#include <array>
#include <map>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compile.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar::schema {

// A pattern that cannot be compiled (`offset`: byte in the pattern, -1: not about one place) or
// an automaton over the size limit.
class DfaError : public std::runtime_error {
 public:
  DfaError(int64_t offset, const std::string& reason) : std::runtime_error(reason), offset_(offset) {}
  int64_t offset() const { return offset_; }

 private:
  int64_t offset_;
};

struct DfaLimits {
  int64_t max_states = int64_t{1} << 16;
  int64_t max_repeat = 10000;
  int32_t max_depth = 128;
  int64_t max_bytes = int64_t{256} << 20;    // one automaton's transition table
  const CompileDeadline* deadline = nullptr;  // checked per state built (CompileTimeout past it)

  // Called once per state an automaton construction adds, with its table so far.
  void check_state(std::size_t transitions) const {
    if (deadline) deadline->check();
    if (static_cast<int64_t>(transitions * sizeof(int32_t)) > max_bytes)
      throw DfaError(-1, "an automaton exceeds the memory limit");
  }
};

// Bytes are grouped into classes that every state treats alike; next[state * classes + class]
// is the next state or -1 (no continuation).
struct Dfa {
  std::array<int32_t, 256> cls{};
  int32_t classes = 1;
  std::vector<int32_t> next;
  std::vector<uint8_t> accepting;
  int32_t start = 0;

  int32_t states() const { return static_cast<int32_t>(accepting.size()); }
  int32_t step(int32_t state, uint8_t byte) const {
    return next[static_cast<std::size_t>(state) * static_cast<std::size_t>(classes) +
                static_cast<std::size_t>(cls[byte])];
  }
  bool matches(std::string_view text) const;
  // No string is accepted.
  bool empty() const;
  // The automaton accepting nothing.
  static Dfa nothing();
};

// An ECMAScript / Python regular expression (see the .cpp), over code points in UTF-8: the strings
// both dialects match, or with `wide` the strings either one matches (what a negated pattern
// must exclude). `search`: JSON Schema's `pattern` semantics (a match anywhere; ^ and $ anchor
// to the ends); otherwise the whole string must match.
Dfa regex_dfa(std::string_view pattern, bool search, const DfaLimits& limits, bool wide = false);
// Every valid UTF-8 string (no surrogates, no overlong forms).
Dfa utf8_dfa();
// Exactly the given strings (each valid UTF-8).
Dfa words_dfa(const std::vector<std::string>& words);
// Valid UTF-8 strings of min..max code points (max -1: no bound).
Dfa length_dfa(int64_t min_code_points, int64_t max_code_points, const DfaLimits& limits);
// Every byte string that contains `needle` (not empty) somewhere.
Dfa containing(std::string_view needle);
Dfa intersect(const Dfa& a, const Dfa& b, const DfaLimits& limits);
Dfa unite(const Dfa& a, const Dfa& b, const DfaLimits& limits);
// Valid UTF-8 strings `a` rejects.
Dfa complement(const Dfa& a, const DfaLimits& limits);
// The smallest equivalent automaton with no dead states.
Dfa minimize(const Dfa& a);

// A DFA from a step function over a small alphabet: states are vectors of ints; step(state,
// byte, next) fills `next` and returns false for no transition; accept(state) says whether the
// state accepts. Bytes outside `alphabet` have no transition.
template <typename Step, typename Accept>
Dfa build_dfa(const std::vector<int32_t>& start, std::string_view alphabet, Step step, Accept accept,
              const DfaLimits& limits) {
  Dfa dfa;
  dfa.cls.fill(static_cast<int32_t>(alphabet.size()));
  for (std::size_t i = 0; i < alphabet.size(); ++i) dfa.cls[static_cast<uint8_t>(alphabet[i])] = static_cast<int32_t>(i);
  dfa.classes = static_cast<int32_t>(alphabet.size()) + 1;
  std::map<std::vector<int32_t>, int32_t> ids;
  std::vector<std::vector<int32_t>> queue;
  ids.emplace(start, 0);
  queue.push_back(start);
  std::vector<int32_t> next_state;
  for (std::size_t head = 0; head < queue.size(); ++head) {
    std::vector<int32_t> state = queue[head];
    dfa.accepting.push_back(accept(state) ? 1 : 0);
    for (std::size_t i = 0; i < alphabet.size(); ++i) {
      int32_t target = -1;
      next_state.clear();
      if (step(state, alphabet[i], next_state)) {
        auto [it, added] = ids.emplace(next_state, static_cast<int32_t>(queue.size()));
        if (added) {
          if (static_cast<int64_t>(queue.size()) >= limits.max_states)
            throw DfaError(-1, "the automaton exceeds its state limit");
          queue.push_back(next_state);
        }
        target = it->second;
      }
      dfa.next.push_back(target);
    }
    dfa.next.push_back(-1);  // bytes outside the alphabet
  }
  return dfa;
}

enum class DfaEncoding {
  raw,          // each byte as itself
  json_string,  // each byte in the JSON string forms for it (raw, \" \\ \/ \b \f \n \r \t, \u00XX)
};
// Rules for { w · suffix : w accepted }: the returned rule is the start state's. The DFA must not
// be empty. `name` prefixes the rule names.
RuleId emit_dfa(Grammar& grammar, const Dfa& dfa, DfaEncoding encoding, const Sequence& suffix,
                const std::string& name);

}  // namespace deepinfer::grammar::schema


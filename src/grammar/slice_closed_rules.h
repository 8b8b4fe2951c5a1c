#pragma once
// Which rules take the whole plain-text slice (text_slice.h) on their own: a rule R is slice
// closed when every slice path, of any length, is a prefix of some sentence R derives through
// productions of the form `terminal rule` (the right-linear rules a DFA compiles to: patterns,
// restricted keys). Then a chart whose last column predicted R takes every slice token whatever
// else it holds, since those items scan the path by themselves. Internal to src/grammar.
//
// Why: the mask walk's slice check (mask_walk.cpp) explores the product of the chart-key
// automaton and the slice, which costs an Earley step and a key per product state; at the key of
// an object with many property names (the complement of the names as a DFA, beside one rule per
// name) every name prefix is a state of its own, so the check ran into its budget after thousands
// of steps and said no. The property is the grammar's, not the chart's: decided once per rule on
// the grammar's productions, it costs a lookup at every later mask.
//
// The decision is a greatest fixpoint over (rule, slice state) pairs: a pair holds while, for
// every slice edge from its state, some production `terminal rule'` reads the edge's byte and
// (rule', next state) holds. A query decides the pairs reachable from its own, on first asking,
// those decided before taken as they are. A no is only a missed chance (the mask walk then checks
// the chart), so a query that reaches more than kMaxPairs pairs is answered no.
#include <cstdint>
#include <mutex>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/stamped_map.h"

namespace deepinfer::grammar {

class CompiledGrammar;

class SliceClosedRules {
 public:
  explicit SliceClosedRules(const CompiledGrammar& grammar) : grammar_(grammar) {}

  // Whether `rule` takes every slice path from the slice's start (between characters).
  bool closed(RuleId rule);

  static constexpr std::size_t kMaxPairs = std::size_t{1} << 16;

 private:
  void decide(RuleId rule);

  const CompiledGrammar& grammar_;
  std::mutex mutex_;                // matchers of one grammar may ask from several threads
  std::vector<uint8_t> known_;      // per rule: bit s set when (rule, slice state s) is decided
  std::vector<uint8_t> holds_;      // per rule: bit s set when it holds
  StampedMap index_;                // decide's pairs by rule << 3 | slice state, kept for its capacity
};

}  // namespace deepinfer::grammar

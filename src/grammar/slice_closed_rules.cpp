#include "grammar/slice_closed_rules.h"

#include <algorithm>

#include <unordered_map>

#include "grammar/earley.h"
#include "grammar/text_slice.h"

namespace deepinfer::grammar {

static_assert(text_slice::kStates <= 8, "a rule's slice states are the bits of a byte");

bool SliceClosedRules::closed(RuleId rule) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (known_.empty()) {
    known_.assign(static_cast<std::size_t>(grammar_.grammar().rule_count()), 0);
    holds_.assign(known_.size(), 0);
  }
  const auto r = static_cast<std::size_t>(rule);
  if (!((known_[r] >> text_slice::kStart) & 1)) decide(rule);
  return (holds_[r] >> text_slice::kStart) & 1;
}

void SliceClosedRules::decide(RuleId rule) {
  // The pairs reachable from (rule, start) in the product of the right-linear productions and
  // the slice, a pair decided before taken as it is. Each pair counts, per slice edge, the pairs
  // it steps to that still hold; a pair with an edge at zero falls, and its fall is taken from
  // the counts of the pairs that step to it. What is left holds: the greatest fixpoint, in time
  // linear in the pairs' edges.
  struct Step {
    const ByteSet* bytes;
    RuleId target;
  };
  std::unordered_map<RuleId, std::vector<Step>> steps_of;
  const auto steps = [&](RuleId r) -> const std::vector<Step>& {
    const auto [it, added] = steps_of.try_emplace(r);
    if (added)
      for (const uint32_t slot : grammar_.productions(r)) {
        const CompiledGrammar::Next first = grammar_.next(slot);
        if (first.is_rule || first.index == CompiledGrammar::kComplete) continue;
        const CompiledGrammar::Next second = grammar_.next(slot + 1);
        if (!second.is_rule || grammar_.next(slot + 2).index != CompiledGrammar::kComplete) continue;
        it->second.push_back({&grammar_.terminal(first.index), second.index});
      }
    return it->second;
  };
  struct Pair {
    RuleId rule;
    int slice_state;
    uint32_t first_group = 0, groups = 0;  // its edges' counts: alive[first_group ..+ groups)
    bool holds = true;
  };
  struct Leaning {
    uint32_t pair, group;  // the pair, and the index in alive of its edges that step here
  };
  std::vector<Pair> pairs;
  std::vector<uint32_t> alive;  // per group of a pair's edges: pairs stepped to that still hold
  std::vector<std::vector<Leaning>> leaning;  // per pair: who steps to it
  index_.clear();
  constexpr uint32_t kForever = UINT32_MAX;  // the edges step into a pair decided to hold
  const auto pair_id = [&](RuleId r, int s) {
    const auto [id, added] = index_.emplace((static_cast<uint64_t>(static_cast<uint32_t>(r)) << 3) | static_cast<uint64_t>(s),
                                            static_cast<uint32_t>(pairs.size()));
    if (added) {
      pairs.push_back({r, s});
      leaning.emplace_back();
    }
    return id;
  };
  pair_id(rule, text_slice::kStart);
  bool too_many = false;
  // A pair's edges are grouped by (next slice state, which steps read the byte): the edges of a
  // group step to the same pairs, so each group is counted once (a DFA state reads most of the
  // ~80 byte classes of the slice's first byte the same way).
  struct Group {
    int slice_state;
    uint64_t readers;
  };
  std::vector<Group> groups;
  for (uint32_t p = 0; p < pairs.size(); ++p) {
    if (pairs.size() > kMaxPairs) {
      too_many = true;
      break;
    }
    const RuleId r = pairs[p].rule;
    const std::vector<Step>& reads = steps(r);
    if (reads.size() > 64) {  // past a group's bit set: a no for the pair, always safe
      pairs[p].holds = false;
      continue;
    }
    groups.clear();
    for (const CompiledGrammar::SliceEdge& edge : grammar_.slice_edges(pairs[p].slice_state)) {
      uint64_t readers = 0;
      for (std::size_t k = 0; k < reads.size(); ++k)
        if (reads[k].bytes->contains(edge.byte)) readers |= uint64_t{1} << k;
      const bool met = std::any_of(groups.begin(), groups.end(), [&](const Group& g) {
        return g.slice_state == edge.slice_to && g.readers == readers;
      });
      if (!met) groups.push_back({edge.slice_to, readers});
    }
    pairs[p].first_group = static_cast<uint32_t>(alive.size());
    pairs[p].groups = static_cast<uint32_t>(groups.size());
    alive.resize(alive.size() + groups.size(), 0);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const uint32_t group = pairs[p].first_group + static_cast<uint32_t>(g);
      for (uint64_t readers = groups[g].readers; readers != 0; readers &= readers - 1) {
        const RuleId target = reads[static_cast<std::size_t>(__builtin_ctzll(readers))].target;
        const auto t = static_cast<std::size_t>(target);
        const int to = groups[g].slice_state;
        if ((known_[t] >> to) & 1) {
          if ((holds_[t] >> to) & 1) alive[group] = kForever;
          continue;
        }
        const uint32_t q = pair_id(target, to);
        if (alive[group] != kForever) ++alive[group];
        leaning[q].push_back({p, group});
      }
    }
  }
  if (too_many) {  // a no is always safe: the mask walk checks the chart instead
    const auto r = static_cast<std::size_t>(rule);
    known_[r] = static_cast<uint8_t>(known_[r] | (1u << text_slice::kStart));
    holds_[r] = static_cast<uint8_t>(holds_[r] & ~(1u << text_slice::kStart));
    return;
  }
  std::vector<uint32_t> fallen;
  for (uint32_t p = 0; p < pairs.size(); ++p) {
    if (!pairs[p].holds) {
      fallen.push_back(p);
      continue;
    }
    for (uint32_t g = 0; g < pairs[p].groups; ++g)
      if (alive[pairs[p].first_group + g] == 0) {
        pairs[p].holds = false;
        fallen.push_back(p);
        break;
      }
  }
  while (!fallen.empty()) {
    const uint32_t q = fallen.back();
    fallen.pop_back();
    for (const Leaning& l : leaning[q]) {
      Pair& p = pairs[l.pair];
      if (!p.holds || alive[l.group] == kForever) continue;
      if (--alive[l.group] == 0) {
        p.holds = false;
        fallen.push_back(l.pair);
      }
    }
  }
  for (const Pair& p : pairs) {
    const auto r = static_cast<std::size_t>(p.rule);
    known_[r] = static_cast<uint8_t>(known_[r] | (1u << p.slice_state));
    if (p.holds) holds_[r] = static_cast<uint8_t>(holds_[r] | (1u << p.slice_state));
  }
}

}  // namespace deepinfer::grammar

#include "grammar/mask_walk.h"

#include <algorithm>

#include "grammar/earley.h"
#include "grammar/slice_closed_rules.h"
#include "grammar/text_slice.h"

namespace deepinfer::grammar {

namespace {

// Product states (automaton state, slice state) a slice check may meet before it says no: a free
// string or key needs a few dozen (its states between and inside characters, the prefixes of the
// keys it may still become); a bounded check, up to a length, one per state and length left.
constexpr std::size_t kClosureBudget = 64;
constexpr std::size_t kBoundedBudget = 512;

void allow(std::span<uint64_t> mask, int32_t id) {
  mask[static_cast<std::size_t>(id) / 64] |= uint64_t{1} << (id % 64);
}

// The chart behind an automaton walk. The walk only looks transitions up; when one is unknown,
// the chart is brought along the walk's current path (the bytes `step` was given at each depth)
// and advanced by the byte, and the new chart's key names the state. Real columns past a depth
// the walk steps from again belong to a path it has left, so they are dropped first.
class LazyChart {
 public:
  LazyChart(Chart& chart, KeyAutomaton& automaton, std::size_t max_depth)
      : chart_(chart), automaton_(automaton), base_(chart.columns.size()), path_(max_depth + 1) {}
  ~LazyChart() { chart_.columns.resize(base_); }
  LazyChart(const LazyChart&) = delete;
  LazyChart& operator=(const LazyChart&) = delete;

  // The state after `byte` from `state`, which the walk reached by its first `depth` bytes.
  int32_t step(int32_t state, std::size_t depth, uint8_t byte) {
    if (real_ > depth) {
      chart_.columns.resize(base_ + depth);
      real_ = depth;
    }
    path_[depth] = byte;
    const uint8_t byte_class = chart_.grammar.byte_class(byte);
    const int32_t known = automaton_.next(state, byte_class);
    if (known != KeyAutomaton::kUnknown || broken_) return broken_ ? KeyAutomaton::kDead : known;
    return compute(state, depth, byte);
  }

  // step() for a walk that does not hand every byte to it: `byte_at(k)` gives the current
  // path's k-th byte, read only here, when a transition is unknown. The chart keeps the columns
  // of the longest prefix it shares with the current path.
  template <typename ByteAt>
  int32_t step_unknown(int32_t state, std::size_t depth, uint8_t byte, const ByteAt& byte_at) {
    if (broken_) return KeyAutomaton::kDead;
    std::size_t shared = std::min(real_, depth);
    for (std::size_t k = 0; k < shared; ++k)
      if (path_[k] != byte_at(k)) {
        shared = k;
        break;
      }
    if (real_ > shared) {
      chart_.columns.resize(base_ + shared);
      real_ = shared;
    }
    for (std::size_t k = real_; k < depth; ++k) path_[k] = byte_at(k);
    path_[depth] = byte;
    return compute(state, depth, byte);
  }

  // The walk cannot trust its result: the automaton outgrew its bound, or a path it said was
  // alive was not (which equal keys rule out). The caller walks the chart instead.
  bool broken() const { return broken_; }

 private:
  // Brings the chart to `depth`, steps it by `byte` and records the transition for every class
  // the chart cannot tell from byte's: one Earley step and one key for each way a state reads.
  int32_t compute(int32_t state, std::size_t depth, uint8_t byte) {
    for (; real_ < depth; ++real_)
      if (!chart_.advance(path_[real_])) {
        broken_ = true;
        return KeyAutomaton::kDead;
      }
    const ByteSet same = chart_.bytes_like(byte);
    int32_t to = KeyAutomaton::kDead;
    if (chart_.advance(byte)) {
      ++real_;
      chart_.mask_key(key_);
      if (automaton_.bytes() > 4 * automaton_.max_bytes()) {
        broken_ = true;
        return KeyAutomaton::kDead;
      }
      to = automaton_.intern(key_);
    }
    const CompiledGrammar& grammar = chart_.grammar;
    for (int c = 0; c < grammar.class_count(); ++c)
      if (same.contains(grammar.class_byte(c))) automaton_.set_next(state, static_cast<uint8_t>(c), to);
    return to;
  }

  Chart& chart_;
  KeyAutomaton& automaton_;
  const std::size_t base_;
  std::vector<uint8_t> path_;
  std::size_t real_ = 0;  // the chart holds the first real_ bytes of path_ past base_
  std::string key_;
  bool broken_ = false;
};

// Whether every path of the plain-text slice up to `length` bytes (SIZE_MAX: of any length) stays
// alive from `start`, so every slice token of at most that length is allowed: a depth first walk of
// the product of the automaton and the slice, a product state skipped when met before with as much
// length left. More product states than the budget is a no (the tokens are walked instead).
// `seen` comes back with the product states met.
struct Product {
  int32_t state;
  int slice_state;
  std::size_t checked;  // bytes of slice paths checked from it
};

bool slice_paths_alive(LazyChart& chart, const KeyAutomaton& automaton, const CompiledGrammar& grammar,
                       int32_t start, std::size_t length, std::vector<Product>& seen) {
  const bool closure = length == SIZE_MAX;
  const std::size_t budget = closure ? kClosureBudget : kBoundedBudget;
  struct Visit {
    int32_t state;
    int slice_state;
    std::size_t left;
    std::size_t next_edge;
  };
  seen.assign(1, {start, text_slice::kStart, length});
  std::vector<Visit> stack{{start, text_slice::kStart, length, 0}};
  while (!stack.empty()) {
    Visit& top = stack.back();
    const auto edges = grammar.slice_edges(top.slice_state);
    if (top.left == 0 || top.next_edge == edges.size()) {
      stack.pop_back();
      continue;
    }
    const CompiledGrammar::SliceEdge edge = edges[top.next_edge++];
    const int32_t to = chart.step(top.state, stack.size() - 1, edge.byte);
    if (to < 0) return false;
    const std::size_t left = closure ? SIZE_MAX : top.left - 1;
    // Between characters, a state already known to take the whole slice needs no second look.
    if (edge.slice_to == text_slice::kStart && automaton.slice_level(to) == text_slice::kLevels) continue;
    const auto met = std::find_if(seen.begin(), seen.end(), [&](const Product& p) {
      return p.state == to && p.slice_state == edge.slice_to;
    });
    if (met != seen.end()) {
      if (met->checked >= left) continue;
      met->checked = left;
    } else {
      if (seen.size() == budget) return false;
      seen.push_back({to, edge.slice_to, left});
    }
    stack.push_back({to, edge.slice_to, left, 0});
  }
  return true;
}

// The highest slice level `start` takes. A whole-slice yes holds for every state met between
// characters too (what is reachable from them is reachable from start), so they are marked and
// the next masks inside the same string or key skip the check.
int8_t check_slice(LazyChart& chart, KeyAutomaton& automaton, const CompiledGrammar& grammar, int32_t start) {
  std::vector<Product> seen;
  if (slice_paths_alive(chart, automaton, grammar, start, SIZE_MAX, seen)) {
    for (const Product& p : seen)
      if (p.slice_state == text_slice::kStart) automaton.set_slice_level(p.state, text_slice::kLevels);
    return text_slice::kLevels;
  }
  // Short paths first: a state that fails them fails the longer ones, and they cost less.
  int8_t level = 0;
  while (level < text_slice::kLevels - 1 &&
         slice_paths_alive(chart, automaton, grammar, start, text_slice::kLevelBytes[static_cast<std::size_t>(level) + 1], seen))
    ++level;
  automaton.set_slice_level(start, level);
  return level;
}

// Whether a rule the last column predicted takes the whole slice by itself: then the chart
// does (those items scan every slice path whatever else the column holds), decided on the
// grammar's rules instead of by a product walk over chart states.
bool predicts_slice_closed_rule(const Chart& chart) {
  SliceClosedRules& rules = chart.grammar.slice_closed_rules();
  for (const RuleId rule : chart.columns.back().predicted)
    if (rules.closed(rule)) return true;
  return false;
}

// The slice level a counted rule of any text (Grammar::Counted::any_text) the last column
// predicted gives the chart by itself: paths up to its characters left (0: none predicted).
int8_t predicted_text_level(const Chart& chart) {
  int8_t level = 0;
  const Grammar& grammar = chart.grammar.grammar();
  for (const RuleId rule : chart.columns.back().predicted) {
    const Grammar::Counted& counted = grammar.counted(rule);
    if (!counted.any_text) continue;
    if (counted.to_max < 0) return text_slice::kLevels;
    while (level < text_slice::kLevels &&
           text_slice::kLevelBytes[static_cast<std::size_t>(level) + 1] <= static_cast<std::size_t>(counted.to_max))
      ++level;
  }
  return level;
}

// The walk's inner loop, a scan of the trie in preorder with one automaton state per depth: per
// node one table lookup, and a jump over the subtree when the byte dies. It keeps everything it
// reads in locals (no member loads, no byte stores that could alias them), and goes to the chart
// only for an unknown transition, which it rebuilds the path for from the nodes on it.
void walk_trie(LazyChart& chart, const KeyAutomaton& automaton, const CompiledGrammar& grammar,
               const Vocabulary& vocabulary, std::span<const Vocabulary::Node> trie, int32_t start, std::span<uint64_t> mask) {
  const std::size_t depths = vocabulary.max_token_length() + 1;
  std::vector<int32_t> states(depths);  // on the path, by depth
  std::vector<uint32_t> on_path(depths);  // the node at each depth of the path
  states[0] = start;
  const Vocabulary::Node* const nodes = trie.data();
  const std::size_t size = trie.size();
  const std::array<uint8_t, 256>& classes = grammar.byte_classes();
  const auto class_count = static_cast<std::size_t>(grammar.class_count());
  const int32_t* table = automaton.table();
  uint64_t* const bits = mask.data();
  const auto byte_at = [&](std::size_t k) { return nodes[on_path[k + 1]].byte; };
  for (std::size_t i = 1; i < size;) {
    const Vocabulary::Node& node = nodes[i];
    const std::size_t depth = node.depth - std::size_t{1};  // the parent's
    const int32_t from = states[depth];
    int32_t to = table[static_cast<std::size_t>(from) * class_count + classes[node.byte]];
    if (to == KeyAutomaton::kUnknown) [[unlikely]] {
      to = chart.step_unknown(from, depth, node.byte, byte_at);
      if (chart.broken()) return;
      table = automaton.table();
    }
    if (to < 0) {
      i += static_cast<std::size_t>(node.subtree_size);
      continue;
    }
    states[depth + 1] = to;
    on_path[depth + 1] = static_cast<uint32_t>(i);
    // Half the nodes end a token, in no pattern a branch predictor could learn: set the bit
    // unconditionally, shifted out to nothing when no token ends here.
    const auto first = static_cast<uint32_t>(vocabulary.first_token_or_any(node));
    bits[first / 64] |= static_cast<uint64_t>(node.token_count != 0) << (first % 64);
    if (node.token_count > 1) [[unlikely]]
      for (const int32_t id : vocabulary.tokens_at(node).subspan(1))
        bits[static_cast<std::size_t>(id) / 64] |= uint64_t{1} << (static_cast<unsigned>(id) % 64);
    ++i;
  }
}

}  // namespace

int32_t KeyAutomaton::intern(const std::string& key) {
  const auto [found, inserted] = ids_.try_emplace(key, static_cast<int32_t>(ids_.size()));
  if (inserted) {
    // The table's room for the bound, taken once: growing it by doubling copied megabytes and
    // touched fresh pages inside one mask walk (a 10 ms mask on the dev split), and clear()
    // keeps it, so a grammar that outgrows the bound does not pay that again at every regrowth.
    if (transitions_.capacity() == 0) transitions_.reserve(max_bytes_ / sizeof(int32_t));
    transitions_.resize(transitions_.size() + static_cast<std::size_t>(class_count_), kUnknown);
    slice_levels_.push_back(kUnknownLevel);
    bytes_ += 2 * key.size() + static_cast<std::size_t>(class_count_) * sizeof(int32_t) + 64;
  }
  return found->second;
}

void KeyAutomaton::clear() {
  ids_.clear();
  transitions_.clear();
  slice_levels_.clear();
  bytes_ = 0;
}

void walk_reference(Chart& chart, const Vocabulary& vocabulary, std::span<uint64_t> mask) {
  if (chart.columns.back().accepting && vocabulary.eos() >= 0) allow(mask, vocabulary.eos());
  // The chart holds a column per byte of the path to the node before: its parent's path.
  const std::span<const Vocabulary::Node> trie = vocabulary.trie(0);
  const std::size_t base = chart.columns.size();
  for (std::size_t i = 1; i < trie.size();) {
    const Vocabulary::Node& node = trie[i];
    chart.columns.resize(base + node.depth - 1);
    if (!chart.advance(node.byte)) {
      i += static_cast<std::size_t>(node.subtree_size);
      continue;
    }
    for (int32_t id : vocabulary.tokens_at(node)) allow(mask, id);
    ++i;
  }
  chart.columns.resize(base);
}

void walk_automaton(Chart& chart, KeyAutomaton& automaton, const Vocabulary& vocabulary, const std::string& key,
                    std::span<uint64_t> mask) {
  bool trusted = false;
  {
    const std::lock_guard<std::mutex> lock(automaton.mutex);
    if (automaton.bytes() > automaton.max_bytes()) automaton.clear();
    LazyChart lazy(chart, automaton, std::max(vocabulary.max_token_length(), kBoundedBudget));
    if (chart.columns.back().accepting && vocabulary.eos() >= 0) allow(mask, vocabulary.eos());
    const int32_t start = automaton.intern(key);
    int8_t level = automaton.slice_level(start);
    if (level == KeyAutomaton::kUnknownLevel) {
      // Decided on rules where they answer (a free string's body, a right-linear rule of any
      // text), else by the product walk over chart states.
      const int8_t text_level = predicted_text_level(chart);
      if (text_level == text_slice::kLevels || predicts_slice_closed_rule(chart)) {
        level = text_slice::kLevels;
      } else if (text_level > 0) {
        level = text_level;
      } else {
        level = check_slice(lazy, automaton, chart.grammar, start);
      }
      automaton.set_slice_level(start, level);
    }
    if (level > 0) {
      const std::span<const uint64_t> slice = vocabulary.slice_tokens(level);
      for (std::size_t w = 0; w < slice.size(); ++w) mask[w] |= slice[w];
    }
    walk_trie(lazy, automaton, chart.grammar, vocabulary, vocabulary.trie(level), start, mask);
    trusted = !lazy.broken();
    if (!trusted) automaton.clear();
  }
  if (trusted) return;
  std::fill(mask.begin(), mask.end(), 0);
  walk_reference(chart, vocabulary, mask);
}

}  // namespace deepinfer::grammar

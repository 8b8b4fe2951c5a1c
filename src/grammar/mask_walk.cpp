#include "grammar/mask_walk.h"

#include <algorithm>

#include "core/error.h"
#include "grammar/earley.h"
#include "grammar/text_slice.h"

namespace deepinfer::grammar {

namespace {

// An automaton past this is dropped at the start of a walk (states come back as they are met);
// a walk that grows one past kWalkAbandonBytes gives up and walks the chart instead, so no grammar
// makes memory run away (counted repetitions can mint a state per trie node).
constexpr std::size_t kMaxAutomatonBytes = std::size_t{8} << 20;
constexpr std::size_t kWalkAbandonBytes = std::size_t{32} << 20;
// Product states (automaton state, slice state) the slice check may meet before it says no: a
// free string needs a handful (one per slice state), a string that counts its characters more.
constexpr std::size_t kSliceBudget = 64;

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
    const int32_t to = compute(depth, byte);
    if (!broken_) automaton_.set_next(state, byte_class, to);
    return to;
  }

  // The walk cannot trust its result: the automaton outgrew its bound, or a path it said was
  // alive was not (which equal keys rule out). The caller walks the chart instead.
  bool broken() const { return broken_; }

 private:
  int32_t compute(std::size_t depth, uint8_t byte) {
    for (; real_ < depth; ++real_)
      if (!chart_.advance(path_[real_])) {
        broken_ = true;
        return KeyAutomaton::kDead;
      }
    if (!chart_.advance(byte)) return KeyAutomaton::kDead;
    ++real_;
    chart_.mask_key(key_);
    if (automaton_.bytes() > kWalkAbandonBytes) {
      broken_ = true;
      return KeyAutomaton::kDead;
    }
    return automaton_.intern(key_);
  }

  Chart& chart_;
  KeyAutomaton& automaton_;
  const std::size_t base_;
  std::vector<uint8_t> path_;
  std::size_t real_ = 0;  // the chart holds the first real_ bytes of path_ past base_
  std::string key_;
  bool broken_ = false;
};

// Whether every token of the plain-text slice is allowed from `start`: no path of the product of
// the automaton and the slice dies. Explored depth first; more than kSliceBudget product states
// (a string whose length is bounded, a pattern) is a no, and the tokens are walked.
bool takes_slice(LazyChart& chart, int32_t start) {
  struct Visit {
    int32_t state;
    int slice_state;
    int next_byte;
  };
  std::vector<std::pair<int32_t, int>> seen{{start, text_slice::kStart}};
  std::vector<Visit> stack{{start, text_slice::kStart, 0}};
  while (!stack.empty()) {
    Visit& top = stack.back();
    if (top.next_byte == 256) {
      stack.pop_back();
      continue;
    }
    const auto byte = static_cast<uint8_t>(top.next_byte++);
    const int slice_to = text_slice::next(top.slice_state, byte);
    if (slice_to == text_slice::kDead) continue;
    const int32_t to = chart.step(top.state, stack.size() - 1, byte);
    if (to < 0) return false;
    const std::pair<int32_t, int> product{to, slice_to};
    if (std::find(seen.begin(), seen.end(), product) != seen.end()) continue;
    if (seen.size() == kSliceBudget) return false;
    seen.push_back(product);
    stack.push_back({to, slice_to, 0});
  }
  return true;
}

void walk_trie(LazyChart& chart, const Vocabulary& vocabulary, int32_t root, int32_t start, std::span<uint64_t> mask) {
  const auto& nodes = vocabulary.nodes();
  const auto& edges = vocabulary.edges();
  struct Frame {
    int32_t node;
    int32_t next_edge;
    int32_t state;
  };
  std::vector<Frame> stack{{root, 0, start}};
  while (!stack.empty()) {
    Frame& frame = stack.back();
    const Vocabulary::Node& node = nodes[static_cast<std::size_t>(frame.node)];
    if (frame.next_edge == node.edge_count) {
      stack.pop_back();
      continue;
    }
    const Vocabulary::Edge& edge = edges[static_cast<std::size_t>(node.first_edge + frame.next_edge++)];
    const int32_t to = chart.step(frame.state, stack.size() - 1, edge.byte);
    if (to < 0) continue;
    for (int32_t id : vocabulary.tokens_at(nodes[static_cast<std::size_t>(edge.child)])) allow(mask, id);
    stack.push_back({edge.child, 0, to});
  }
}

}  // namespace

int32_t KeyAutomaton::intern(const std::string& key) {
  const auto [found, inserted] = ids_.try_emplace(key, static_cast<int32_t>(ids_.size()));
  if (inserted) {
    transitions_.resize(transitions_.size() + static_cast<std::size_t>(class_count_), kUnknown);
    slices_.push_back(Slice::unknown);
    bytes_ += 2 * key.size() + static_cast<std::size_t>(class_count_) * sizeof(int32_t) + 64;
  }
  return found->second;
}

void KeyAutomaton::clear() {
  ids_.clear();
  transitions_.clear();
  slices_.clear();
  bytes_ = 0;
}

void walk_reference(Chart& chart, const Vocabulary& vocabulary, std::span<uint64_t> mask) {
  if (chart.columns.back().accepting && vocabulary.eos() >= 0) allow(mask, vocabulary.eos());
  // The chart's columns grow and shrink like a stack along the path.
  const auto& nodes = vocabulary.nodes();
  const auto& edges = vocabulary.edges();
  const std::size_t base = chart.columns.size();
  struct Frame {
    int32_t node;
    int32_t next_edge;
  };
  std::vector<Frame> stack{{0, 0}};
  while (!stack.empty()) {
    Frame& frame = stack.back();
    const Vocabulary::Node& node = nodes[static_cast<std::size_t>(frame.node)];
    if (frame.next_edge == node.edge_count) {
      stack.pop_back();
      if (!stack.empty()) chart.columns.pop();
      continue;
    }
    const Vocabulary::Edge& edge = edges[static_cast<std::size_t>(node.first_edge + frame.next_edge++)];
    if (!chart.advance(edge.byte)) continue;
    for (int32_t id : vocabulary.tokens_at(nodes[static_cast<std::size_t>(edge.child)])) allow(mask, id);
    stack.push_back({edge.child, 0});
  }
  if (chart.columns.size() != base) fail("grammar matcher: the mask walk left the parser moved");
}

void walk_automaton(Chart& chart, const Vocabulary& vocabulary, const std::string& key, std::span<uint64_t> mask) {
  KeyAutomaton& automaton = chart.grammar.automaton();
  bool trusted = false;
  {
    const std::lock_guard<std::mutex> lock(automaton.mutex);
    if (automaton.bytes() > kMaxAutomatonBytes) automaton.clear();
    LazyChart lazy(chart, automaton, std::max(vocabulary.max_token_length(), kSliceBudget));
    if (chart.columns.back().accepting && vocabulary.eos() >= 0) allow(mask, vocabulary.eos());
    const int32_t start = automaton.intern(key);
    int32_t root = 0;  // the whole trie
    if (vocabulary.slice_token_count() > 0) {
      if (automaton.slice(start) == KeyAutomaton::Slice::unknown) {
        const bool taken = takes_slice(lazy, start);
        if (!lazy.broken()) automaton.set_slice(start, taken ? KeyAutomaton::Slice::taken : KeyAutomaton::Slice::not_taken);
      }
      if (automaton.slice(start) == KeyAutomaton::Slice::taken) {
        const std::span<const uint64_t> slice = vocabulary.slice_tokens();
        for (std::size_t w = 0; w < slice.size(); ++w) mask[w] |= slice[w];
        root = vocabulary.rest_root();
      }
    }
    walk_trie(lazy, vocabulary, root, start, mask);
    trusted = !lazy.broken();
    if (!trusted) automaton.clear();
  }
  if (trusted) return;
  std::fill(mask.begin(), mask.end(), 0);
  walk_reference(chart, vocabulary, mask);
}

}  // namespace deepinfer::grammar

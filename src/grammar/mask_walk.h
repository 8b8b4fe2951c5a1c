#pragma once
// The two ways to compute a mask over the vocabulary's token trie. Internal to src/grammar.
//
// walk_reference: depth first over the trie, the Earley chart advanced byte by byte along the
// path; a node whose byte the grammar rejects cuts its subtree. Every step is an Earley step.
//
// walk_automaton: the same walk over a deterministic automaton whose states are chart keys
// (Chart::mask_key: equal keys, equal continuations), built lazily and kept by the grammar. A
// trie node costs a table lookup (state, byte class) -> state; the chart is advanced only to
// compute a transition not seen before, along the path the walk is on. Before walking, the start
// state is checked once against the plain-text slice (text_slice.h): when every path of the slice
// stays alive from it (the inside of a free string or key), the slice's tokens are added at once
// and only the other tokens are walked; when only paths up to a length do (a string whose length
// is bounded), the tokens of that level. The states are the grammar's, so every matcher and request of the
// grammar shares them, and a state met anywhere (any string of the same property, any array
// element) is a first visit no more.
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace deepinfer::grammar {

struct Chart;
class Vocabulary;

class KeyAutomaton {
 public:
  static constexpr int32_t kDead = -1, kUnknown = -2;
  static constexpr int8_t kUnknownLevel = -1;

  // An automaton past max_bytes (keys and tables) is dropped at the start of a walk, and states
  // come back as they are met; a walk that grows one past 4 x max_bytes gives up and walks the
  // chart instead, so no grammar makes memory run away (a counted repetition can mint a state per
  // trie node).
  static constexpr std::size_t kDefaultMaxBytes = std::size_t{8} << 20;
  explicit KeyAutomaton(int class_count, std::size_t max_bytes = kDefaultMaxBytes)
      : class_count_(class_count), max_bytes_(max_bytes) {}

  // The state for a chart key, new states with every transition unknown.
  int32_t intern(const std::string& key);
  int32_t next(int32_t state, uint8_t byte_class) const {
    return transitions_[static_cast<std::size_t>(state) * static_cast<std::size_t>(class_count_) + byte_class];
  }
  // The table next() reads, state * class_count + class; interning a state may move it.
  const int32_t* table() const { return transitions_.data(); }
  void set_next(int32_t state, uint8_t byte_class, int32_t to) {
    transitions_[static_cast<std::size_t>(state) * static_cast<std::size_t>(class_count_) + byte_class] = to;
  }
  // The slice level (text_slice.h) the state takes, kUnknownLevel before it is checked.
  int8_t slice_level(int32_t state) const { return slice_levels_[static_cast<std::size_t>(state)]; }
  void set_slice_level(int32_t state, int8_t level) { slice_levels_[static_cast<std::size_t>(state)] = level; }

  int32_t state_count() const { return static_cast<int32_t>(slice_levels_.size()); }
  std::size_t bytes() const { return bytes_; }
  std::size_t max_bytes() const { return max_bytes_; }
  void clear();

  // Held for a whole walk: matchers of one grammar build one automaton.
  std::mutex mutex;

 private:
  int class_count_;
  std::size_t max_bytes_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<int32_t> transitions_;  // state * class_count + class
  std::vector<int8_t> slice_levels_;
  std::size_t bytes_ = 0;             // keys and tables, for the bound on memory
};

// Both fill a zeroed mask with the tokens the chart allows next (EOS included) and leave the
// chart as they found it. `key` is the chart's mask key; `automaton` is the chart's grammar's
// (CompiledGrammar::automaton) or, in tests, one of the same byte classes.
void walk_reference(Chart& chart, const Vocabulary& vocabulary, std::span<uint64_t> mask);
void walk_automaton(Chart& chart, KeyAutomaton& automaton, const Vocabulary& vocabulary, const std::string& key,
                    std::span<uint64_t> mask);

}  // namespace deepinfer::grammar

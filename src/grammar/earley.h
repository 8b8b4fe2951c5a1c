#pragma once
// The Earley parser the matcher runs (matcher.h): the prepared grammar's tables, the columns of a
// chart, and the chart itself with its byte step and its mask key. Internal to src/grammar.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/compile.h"
#include "grammar/grammar.h"
#include "grammar/lru_masks.h"
#include "grammar/matcher.h"
#include "grammar/stamped_map.h"
#include "grammar/text_slice.h"

namespace deepinfer::grammar {

class KeyAutomaton;
class SliceClosedRules;

// Every production gets length + 1 slots, one per dot position, so a slot number alone names an
// item's production and dot; slot_next says what the dot is before.
class CompiledGrammar {
 public:
  // Refuses (CompileError) a grammar whose tables would exceed limits.max_bytes; stops at
  // limits' deadline (CompileTimeout).
  CompiledGrammar(Grammar grammar, const CompileLimits& limits);
  ~CompiledGrammar();

  // The tables' bytes for `grammar` (what the constructor will allocate), and the grammar's own.
  static int64_t table_bytes(const Grammar& grammar);
  int64_t bytes() const { return table_bytes(grammar_) + grammar_.bytes(); }

  static constexpr int32_t kComplete = -1;
  // 2,020 words a mask for a 129,280-token vocabulary: 2 MiB at most per grammar.
  static constexpr std::size_t kCachedMasks = 128;
  struct Next {
    bool is_rule = false;
    int32_t index = kComplete;  // rule id, terminal index, or kComplete
  };

  const Grammar& grammar() const { return grammar_; }
  Next next(uint32_t slot) const { return slot_next_[slot]; }
  RuleId lhs(uint32_t slot) const { return slot_lhs_[slot]; }
  std::span<const uint32_t> productions(RuleId rule) const { return rule_productions_[static_cast<std::size_t>(rule)]; }
  bool nullable(RuleId rule) const { return nullable_[static_cast<std::size_t>(rule)] != 0; }
  const ByteSet& terminal(int32_t index) const { return grammar_.terminal_set(index); }
  RuleId start() const { return grammar_.start(); }

  // Bytes no terminal tells apart share a class: the parser steps the same on each, so the mask
  // walk's transitions (mask_walk.h) are kept per class, not per byte.
  uint8_t byte_class(uint8_t byte) const { return byte_class_[byte]; }
  const std::array<uint8_t, 256>& byte_classes() const { return byte_class_; }
  int class_count() const { return class_count_; }
  uint8_t class_byte(int byte_class) const { return class_byte_[static_cast<std::size_t>(byte_class)]; }  // its first
  // The plain-text slice's steps (text_slice.h) in these classes: from each slice state, one byte
  // for each (byte class, next slice state) pair, so a slice check tries each step once.
  struct SliceEdge {
    uint8_t byte;
    int8_t slice_to;
  };
  std::span<const SliceEdge> slice_edges(int slice_state) const { return slice_edges_[static_cast<std::size_t>(slice_state)]; }

  // Masks already computed, by chart key (Chart::mask_key), for one vocabulary: shared by every
  // matcher of this grammar, so requests with the same schema share them too.
  bool cached_mask(const Vocabulary* vocabulary, const std::string& key, std::span<uint64_t> mask) const;
  Matcher::MaskCacheStats mask_cache_stats() const {
    const std::lock_guard<std::mutex> lock(mask_cache_.mutex);
    return mask_cache_.stats;
  }
  void store_mask(const Vocabulary* vocabulary, const std::string& key, std::span<const uint64_t> mask) const;
  // What each slot stands for in a mask cache key when no token is longer than `horizon` bytes:
  // the same slot of the first rule met of its class, where counted rules (Grammar::Counted) of a
  // family whose counts are both past the horizon are one class; itself for every other slot.
  // Null when the grammar counts nothing. Built once per horizon (a vocabulary's longest token).
  std::shared_ptr<const std::vector<uint32_t>> mask_aliases(std::size_t horizon) const;
  // The chart-key automaton the cached walk builds as it goes, shared like the masks.
  KeyAutomaton& automaton() const { return *automaton_; }
  // Which rules take the whole plain-text slice by themselves (slice_closed_rules.h), decided as
  // mask walks ask.
  SliceClosedRules& slice_closed_rules() const { return *slice_closed_rules_; }

 private:
  void compute_nullable(const CompileLimits& limits);

  struct MaskCache {
    std::mutex mutex;
    const Vocabulary* vocabulary = nullptr;
    LruMasks masks{kCachedMasks};
    Matcher::MaskCacheStats stats;
  };

  Grammar grammar_;
  std::vector<Next> slot_next_;
  std::vector<RuleId> slot_lhs_;
  std::vector<std::vector<uint32_t>> rule_productions_;  // first slot of each production
  std::vector<char> nullable_;
  std::array<uint8_t, 256> byte_class_{};
  int class_count_ = 1;
  std::array<uint8_t, 256> class_byte_{};
  std::array<std::vector<SliceEdge>, text_slice::kStates> slice_edges_;
  mutable MaskCache mask_cache_;
  mutable std::mutex aliases_mutex_;
  mutable std::shared_ptr<const std::vector<uint32_t>> aliases_;
  mutable std::size_t aliases_horizon_ = 0;
  std::unique_ptr<KeyAutomaton> automaton_;
  std::unique_ptr<SliceClosedRules> slice_closed_rules_;
};

struct Item {
  uint32_t slot;
  uint32_t origin;
  bool operator==(const Item& other) const = default;
};

// The items after one byte of output (or at the start). A mask walk makes and drops one per trie
// node it visits, so a column is reused rather than freed (its vectors keep their capacity) and
// holds small flat lists: most columns have a few dozen items, where a linear search beats
// hashing; a large one switches its duplicate check to a hash set.
struct Column {
  std::vector<Item> items;
  std::vector<Item> scanners;                           // dot before a terminal
  std::vector<std::pair<RuleId, Item>> waiting;         // dot before a rule; by rule once closed
  std::vector<RuleId> predicted;
  StampedMap seen;                                      // only past kLinearItems
  bool accepting = false;
  uint64_t generation = 0;  // which push of its slot this column is (Columns::push)

  static constexpr std::size_t kLinearItems = 48;

  void clear();
  void add(const Item& item);
  bool predict(RuleId rule);
  // The items of a closed column waiting for `rule`: a completion looks them up, and a grammar
  // with many alternatives at one place (a large anyOf) keeps thousands waiting in one column.
  std::span<const std::pair<RuleId, Item>> waiting_for(RuleId rule) const;
};

// Columns as a stack that keeps the popped ones for reuse.
class Columns {
 public:
  std::size_t size() const { return size_; }
  Column& operator[](std::size_t k) { return columns_[k]; }
  const Column& operator[](std::size_t k) const { return columns_[k]; }
  Column& back() { return columns_[size_ - 1]; }
  const Column& back() const { return columns_[size_ - 1]; }
  Column& push() {
    if (size_ == columns_.size()) columns_.emplace_back();
    Column& column = columns_[size_++];
    column.clear();
    column.generation = ++pushes_;
    return column;
  }
  void pop() { --size_; }
  void resize(std::size_t size) { size_ = size; }  // shrink only

 private:
  std::vector<Column> columns_;
  std::size_t size_ = 0;
  uint64_t pushes_ = 0;
};

// An Earley chart over the output so far, one column per byte, with the column count before each
// accepted token so rollback is a pop.
struct Chart {
  const CompiledGrammar& grammar;
  Columns columns;
  std::vector<std::size_t> marks;  // columns.size() before each accepted token

  explicit Chart(const CompiledGrammar& g);

  // A new column after `byte`; false (and nothing added) when no item scans it.
  bool advance(uint8_t byte);
  // The part of the chart later bytes can reach, as bytes (earley.cpp says what it holds): two
  // charts with equal keys accept the same continuations. With `aliases`
  // (CompiledGrammar::mask_aliases), slots are written as what they stand for: equal keys then
  // accept the same continuations up to the aliases' horizon, which is all a mask looks at.
  void mask_key(std::string& key, std::span<const uint32_t> aliases = {}) const;
  ByteSet next_bytes() const;
  // The bytes the last column's scanners cannot tell from `byte`: each steps the chart to the same
  // column (a class of the bytes this column reads, coarser than the grammar's byte classes).
  ByteSet bytes_like(uint8_t byte) const;

 private:
  void close(std::size_t k);

  // mask_key's working lists, kept so a key costs no allocation once they have grown.
  struct KeyNode {
    std::size_t column;
    RuleId rule;
  };
  mutable std::vector<KeyNode> key_nodes_;
  mutable StampedMap key_node_ids_, key_visiting_;  // by column << 32 | rule
  mutable std::vector<std::pair<uint32_t, uint32_t>> key_ends_;
  // Where each node's chains of tails end, as met: it depends only on the columns up to the
  // node's, which stay while that column does (same generation), so the nodes of the output
  // before a mask walk are followed once, not again for every state the walk keys.
  struct ChainEnd {
    uint32_t slot;  // after the dot
    uint32_t column;
    RuleId rule;
  };
  struct ChainEnds {
    uint64_t generation;
    uint32_t first, count;  // in chain_arena_
  };
  std::span<const ChainEnd> chain_ends(std::size_t column, RuleId rule) const;
  mutable std::unordered_map<uint64_t, ChainEnds> chain_ends_;
  mutable std::vector<ChainEnd> chain_arena_, chain_scratch_;
};

}  // namespace deepinfer::grammar

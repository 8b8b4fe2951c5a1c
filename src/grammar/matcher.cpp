#include "grammar/matcher.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "grammar/compile.h"

namespace deepinfer::grammar {

// ---- the prepared grammar ----

// Every production gets length + 1 slots, one per dot position, so a slot number alone names an
// item's production and dot; slot_next says what the dot is before.
class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, const CompileLimits& limits);

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

  // Masks already computed, by chart key (Matcher::State::mask_key), for one vocabulary: shared
  // by every matcher of this grammar, so requests with the same schema share them too.
  bool cached_mask(const Vocabulary* vocabulary, const std::string& key, std::span<uint64_t> mask) const;
  Matcher::MaskCacheStats mask_cache_stats() const {
    const std::lock_guard<std::mutex> lock(mask_cache_.mutex);
    return mask_cache_.stats;
  }
  void store_mask(const Vocabulary* vocabulary, const std::string& key, std::span<const uint64_t> mask) const;

 private:
  struct MaskCache {
    std::mutex mutex;
    const Vocabulary* vocabulary = nullptr;
    std::unordered_map<std::string, std::vector<uint64_t>> masks;
    Matcher::MaskCacheStats stats;
  };

  Grammar grammar_;
  std::vector<Next> slot_next_;
  std::vector<RuleId> slot_lhs_;
  std::vector<std::vector<uint32_t>> rule_productions_;  // first slot of each production
  std::vector<char> nullable_;
  mutable MaskCache mask_cache_;

  void compute_nullable(const CompileLimits& limits);
};

bool CompiledGrammar::cached_mask(const Vocabulary* vocabulary, const std::string& key, std::span<uint64_t> mask) const {
  const std::lock_guard<std::mutex> lock(mask_cache_.mutex);
  const auto found = mask_cache_.vocabulary == vocabulary ? mask_cache_.masks.find(key) : mask_cache_.masks.end();
  if (found == mask_cache_.masks.end() || found->second.size() != mask.size()) {
    ++mask_cache_.stats.misses;
    return false;
  }
  std::copy(found->second.begin(), found->second.end(), mask.begin());
  ++mask_cache_.stats.hits;
  return true;
}

void CompiledGrammar::store_mask(const Vocabulary* vocabulary, const std::string& key,
                                 std::span<const uint64_t> mask) const {
  const std::lock_guard<std::mutex> lock(mask_cache_.mutex);
  if (mask_cache_.vocabulary != vocabulary) {  // the first vocabulary keeps the cache
    if (mask_cache_.vocabulary) return;
    mask_cache_.vocabulary = vocabulary;
  }
  if (mask_cache_.masks.size() >= kCachedMasks) mask_cache_.masks.clear();  // the hot ones come back
  mask_cache_.masks.emplace(key, std::vector<uint64_t>(mask.begin(), mask.end()));
}

int64_t CompiledGrammar::table_bytes(const Grammar& grammar) {
  // A slot per symbol and one per production end (size() counts both), each a Next and a lhs;
  // a production's first slot and a rule's vector and nullable flag.
  int64_t productions = 0;
  for (RuleId r = 0; r < grammar.rule_count(); ++r) productions += static_cast<int64_t>(grammar.alternatives(r).size());
  return grammar.size() * static_cast<int64_t>(sizeof(Next) + sizeof(RuleId)) +
         productions * static_cast<int64_t>(sizeof(uint32_t)) +
         grammar.rule_count() * static_cast<int64_t>(sizeof(std::vector<uint32_t>) + 1);
}

CompiledGrammar::CompiledGrammar(Grammar grammar, const CompileLimits& limits) : grammar_(std::move(grammar)) {
  grammar_.validate();
  if (const int64_t needed = table_bytes(grammar_) + grammar_.bytes(); needed > limits.max_bytes)
    throw CompileError("", str_cat("the grammar needs ", needed, " bytes prepared, above the limit of ", limits.max_bytes));
  const int32_t rules = grammar_.rule_count();
  rule_productions_.resize(static_cast<std::size_t>(rules));
  for (RuleId r = 0; r < rules; ++r)
    for (const Sequence& alternative : grammar_.alternatives(r)) {
      limits.check_deadline();
      rule_productions_[static_cast<std::size_t>(r)].push_back(static_cast<uint32_t>(slot_next_.size()));
      for (const Symbol& symbol : alternative) {
        slot_next_.push_back({symbol.is_rule, symbol.index});
        slot_lhs_.push_back(r);
      }
      slot_next_.push_back({false, kComplete});
      slot_lhs_.push_back(r);
    }
  compute_nullable(limits);
}

// A rule is nullable when one alternative is all nullable rules. By worklist, linear in the
// grammar: each alternative counts its symbols not yet known nullable, and a rule found nullable
// decrements the alternatives it occurs in. (A fixpoint of passes over the rules is quadratic: a
// chain of n rules each deriving the next, defined first to last, takes n passes.)
void CompiledGrammar::compute_nullable(const CompileLimits& limits) {
  const auto rules = static_cast<std::size_t>(grammar_.rule_count());
  nullable_.assign(rules, 0);
  struct Alternative {
    RuleId lhs;
    int64_t pending;  // symbols not yet known nullable; a terminal never is
  };
  std::vector<Alternative> alternatives;
  std::vector<std::vector<int32_t>> occurs_in(rules);  // rule -> alternatives, once per occurrence
  std::vector<RuleId> found;
  for (RuleId r = 0; r < grammar_.rule_count(); ++r)
    for (const Sequence& alternative : grammar_.alternatives(r)) {
      limits.check_deadline();
      const auto index = static_cast<int32_t>(alternatives.size());
      alternatives.push_back({r, static_cast<int64_t>(alternative.size())});
      for (const Symbol& symbol : alternative)
        if (symbol.is_rule) occurs_in[static_cast<std::size_t>(symbol.index)].push_back(index);
      if (alternative.empty() && !nullable_[static_cast<std::size_t>(r)]) {
        nullable_[static_cast<std::size_t>(r)] = 1;
        found.push_back(r);
      }
    }
  while (!found.empty()) {
    limits.check_deadline();
    const RuleId rule = found.back();
    found.pop_back();
    for (const int32_t index : occurs_in[static_cast<std::size_t>(rule)]) {
      Alternative& alternative = alternatives[static_cast<std::size_t>(index)];
      if (--alternative.pending == 0 && !nullable_[static_cast<std::size_t>(alternative.lhs)]) {
        nullable_[static_cast<std::size_t>(alternative.lhs)] = 1;
        found.push_back(alternative.lhs);
      }
    }
  }
}

std::shared_ptr<const CompiledGrammar> prepare(Grammar grammar) { return prepare(std::move(grammar), CompileLimits{}); }

std::shared_ptr<const CompiledGrammar> prepare(Grammar grammar, const CompileLimits& limits) {
  return std::make_shared<const CompiledGrammar>(std::move(grammar), limits);
}

int64_t prepared_bytes(const CompiledGrammar& grammar) { return grammar.bytes(); }

int64_t mask_cache_bytes(int32_t tokens) {
  return static_cast<int64_t>(CompiledGrammar::kCachedMasks) * ((tokens + 63) / 64) * static_cast<int64_t>(sizeof(uint64_t));
}

// ---- Earley columns ----

namespace {

struct Item {
  uint32_t slot;
  uint32_t origin;
  bool operator==(const Item& other) const = default;
};

uint64_t key(const Item& item) { return (static_cast<uint64_t>(item.slot) << 32) | item.origin; }

// The items after one byte of output (or at the start). A mask walk makes and drops one per trie
// node it visits, so a column is reused rather than freed (its vectors keep their capacity) and
// holds small flat lists: most columns have a few dozen items, where a linear search beats
// hashing; a large one switches its duplicate check to a hash set.
struct Column {
  std::vector<Item> items;
  std::vector<Item> scanners;                           // dot before a terminal
  std::vector<std::pair<RuleId, Item>> waiting;         // dot before a rule
  std::vector<RuleId> predicted;
  std::unordered_set<uint64_t> seen;                    // only past kLinearItems
  bool accepting = false;

  static constexpr std::size_t kLinearItems = 48;

  void clear() {
    items.clear();
    scanners.clear();
    waiting.clear();
    predicted.clear();
    seen.clear();
    accepting = false;
  }
  void add(const Item& item) {
    if (items.size() < kLinearItems) {
      if (std::find(items.begin(), items.end(), item) != items.end()) return;
      items.push_back(item);
      if (items.size() == kLinearItems)
        for (const Item& held : items) seen.insert(key(held));
      return;
    }
    if (seen.insert(key(item)).second) items.push_back(item);
  }
  bool predict(RuleId rule) {
    if (std::find(predicted.begin(), predicted.end(), rule) != predicted.end()) return false;
    predicted.push_back(rule);
    return true;
  }
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
    return column;
  }
  void pop() { --size_; }
  void resize(std::size_t size) { size_ = size; }  // shrink only

 private:
  std::vector<Column> columns_;
  std::size_t size_ = 0;
};

}  // namespace

struct Matcher::State {
  const CompiledGrammar& grammar;
  Columns columns;
  std::vector<std::size_t> marks;  // columns.size() before each accepted token

  explicit State(const CompiledGrammar& g) : grammar(g) {
    Column& first = columns.push();
    for (uint32_t slot : grammar.productions(grammar.start())) first.add({slot, 0});
    first.predict(grammar.start());
    close(columns.size() - 1);
  }

  // Predictions and completions of column k until nothing changes (Aycock and Horspool's
  // nullable rule: predicting a nullable rule also steps over it, so completions whose origin is
  // this column need no second pass).
  void close(std::size_t k) {
    Column& column = columns[k];
    for (std::size_t i = 0; i < column.items.size(); ++i) {
      const Item item = column.items[i];
      const CompiledGrammar::Next next = grammar.next(item.slot);
      if (next.index == CompiledGrammar::kComplete) {
        const RuleId lhs = grammar.lhs(item.slot);
        if (lhs == grammar.start() && item.origin == 0) column.accepting = true;
        if (item.origin == k) continue;
        // `from` is an earlier column: its lists no longer change while this one closes.
        const Column& from = columns[item.origin];
        for (const auto& [rule, parent] : from.waiting)
          if (rule == lhs) column.add({parent.slot + 1, parent.origin});
      } else if (next.is_rule) {
        column.waiting.emplace_back(next.index, item);
        if (column.predict(next.index))
          for (uint32_t slot : grammar.productions(next.index)) column.add({slot, static_cast<uint32_t>(k)});
        if (grammar.nullable(next.index)) column.add({item.slot + 1, item.origin});
      } else {
        column.scanners.push_back(item);
      }
    }
  }

  // A new column after `byte`; false (and nothing added) when no item scans it.
  bool advance(uint8_t byte) {
    const std::size_t k = columns.size();
    Column& next = columns.push();
    const Column& previous = columns[k - 1];
    for (const Item& item : previous.scanners)
      if (grammar.terminal(grammar.next(item.slot).index).contains(byte)) next.add({item.slot + 1, item.origin});
    if (next.items.empty()) {
      columns.pop();
      return false;
    }
    close(k);
    return true;
  }

  // The part of the chart later bytes can reach, as bytes. New columns start from the last
  // column's scanners; when an item completes, the items waiting for its rule in its origin
  // column step over it. A waiting item whose rule is its last symbol (a tail: S -> "x" S in a
  // right-linear rule, `string` at the end of `pair`) completes in turn at once, so what matters
  // of it is where that chain of tails ends: the first waiting items that are not tails. So the
  // key is: whether the last column accepts; each scanner's slot with the node (origin column,
  // its rule); and for each node, the non-tail items its chains of tails end at, each with its
  // own node, the nodes numbered in the order they are met. Which continuations the grammar
  // accepts depends on nothing else (the tails' own completions only complete further, and
  // whether a later column accepts does not change a mask), so two charts with equal keys get
  // the same mask wherever in the output they stand: at every position of a string or a
  // right-linear pattern, in each element of an array, in each string of the same property.
  void mask_key(std::string& key) const {
    key.clear();
    struct Node {
      std::size_t column;
      RuleId rule;
    };
    std::vector<Node> nodes;
    const auto node = [&](std::size_t column, RuleId rule) {
      for (std::size_t n = 0; n < nodes.size(); ++n)
        if (nodes[n].column == column && nodes[n].rule == rule) return static_cast<uint32_t>(n);
      nodes.push_back({column, rule});
      return static_cast<uint32_t>(nodes.size() - 1);
    };
    const auto put = [&](uint32_t value) { key.append(reinterpret_cast<const char*>(&value), sizeof value); };
    const Column& last = columns.back();
    put(last.accepting ? 1 : 0);
    put(static_cast<uint32_t>(last.scanners.size()));
    for (const Item& item : last.scanners) {
      put(item.slot);
      put(node(item.origin, grammar.lhs(item.slot)));
    }
    std::vector<std::pair<uint32_t, uint32_t>> ends;  // (slot after the dot, node)
    std::vector<Node> visiting;
    // The non-tail items that completing `rule` in `column` reaches.
    const auto chain_ends = [&](auto& self, std::size_t column, RuleId rule) -> void {
      for (const Node& seen : visiting)
        if (seen.column == column && seen.rule == rule) return;
      visiting.push_back({column, rule});
      for (const auto& [waits_for, parent] : columns[column].waiting) {
        if (waits_for != rule) continue;
        const uint32_t after = parent.slot + 1;
        if (grammar.next(after).index == CompiledGrammar::kComplete) {
          self(self, parent.origin, grammar.lhs(parent.slot));
        } else {
          ends.emplace_back(after, node(parent.origin, grammar.lhs(parent.slot)));
        }
      }
    };
    for (std::size_t n = 0; n < nodes.size(); ++n) {  // grows while it runs
      ends.clear();
      visiting.clear();
      chain_ends(chain_ends, nodes[n].column, nodes[n].rule);
      std::sort(ends.begin(), ends.end());
      ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
      put(static_cast<uint32_t>(ends.size()));
      for (const auto& [slot, child] : ends) {
        put(slot);
        put(child);
      }
    }
  }

  ByteSet next_bytes() const {
    ByteSet bytes;
    for (const Item& item : columns.back().scanners) bytes.add(grammar.terminal(grammar.next(item.slot).index));
    return bytes;
  }
};

// ---- the vocabulary trie ----

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> specials, int32_t eos)
    : token_bytes_(std::move(token_bytes)), special_(token_bytes_.size(), 0), eos_(eos) {
  for (int32_t id : specials) {
    if (id < 0 || id >= size()) fail("vocabulary: special token ", id, " outside ", size(), " tokens");
    special_[static_cast<std::size_t>(id)] = 1;
  }
  if (eos_ >= size()) fail("vocabulary: eos ", eos_, " outside ", size(), " tokens");
  // Build the trie over sorted token bytes: children of a node are contiguous edges.
  std::vector<int32_t> order;
  for (int32_t id = 0; id < size(); ++id)
    if (!special_[static_cast<std::size_t>(id)] && id != eos_ && !token_bytes_[static_cast<std::size_t>(id)].empty())
      order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes_[static_cast<std::size_t>(a)] < token_bytes_[static_cast<std::size_t>(b)];
  });
  // Recursive construction over [begin, end) of `order` sharing a prefix of `depth` bytes.
  struct Builder {
    Vocabulary& v;
    const std::vector<int32_t>& order;
    int32_t build(std::size_t begin, std::size_t end, std::size_t depth) {
      const auto node = static_cast<int32_t>(v.nodes_.size());
      v.nodes_.push_back({});
      std::size_t i = begin;
      // Tokens that end exactly here come first in sorted order.
      const auto first_token = static_cast<int32_t>(v.tokens_.size());
      while (i < end && v.token_bytes_[static_cast<std::size_t>(order[i])].size() == depth) v.tokens_.push_back(order[i++]);
      v.nodes_[static_cast<std::size_t>(node)].first_token = first_token;
      v.nodes_[static_cast<std::size_t>(node)].token_count = static_cast<int32_t>(v.tokens_.size()) - first_token;
      std::vector<std::pair<uint8_t, std::pair<std::size_t, std::size_t>>> groups;
      while (i < end) {
        const auto byte = static_cast<uint8_t>(v.token_bytes_[static_cast<std::size_t>(order[i])][depth]);
        std::size_t j = i;
        while (j < end && static_cast<uint8_t>(v.token_bytes_[static_cast<std::size_t>(order[j])][depth]) == byte) ++j;
        groups.push_back({byte, {i, j}});
        i = j;
      }
      std::vector<Edge> edges;
      for (const auto& [byte, range] : groups) edges.push_back({byte, build(range.first, range.second, depth + 1)});
      v.nodes_[static_cast<std::size_t>(node)].first_edge = static_cast<int32_t>(v.edges_.size());
      v.nodes_[static_cast<std::size_t>(node)].edge_count = static_cast<int32_t>(edges.size());
      v.edges_.insert(v.edges_.end(), edges.begin(), edges.end());
      return node;
    }
  };
  Builder{*this, order}.build(0, order.size(), 0);
}

// ---- the matcher ----

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::shared_ptr<const Vocabulary> vocabulary)
    : state_(std::make_unique<State>(*grammar)), grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {}
Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

bool Matcher::accept_bytes(std::string_view bytes, int64_t* rejected_at) {
  if (finished_) {
    if (rejected_at) *rejected_at = 0;
    return false;
  }
  const std::size_t mark = state_->columns.size();
  for (std::size_t i = 0; i < bytes.size(); ++i)
    if (!state_->advance(static_cast<uint8_t>(bytes[i]))) {
      state_->columns.resize(mark);
      if (rejected_at) *rejected_at = static_cast<int64_t>(i);
      return false;
    }
  state_->marks.push_back(mark);
  return true;
}

bool Matcher::accept_token(int32_t id) {
  if (!vocabulary_ || id < 0 || id >= vocabulary_->size()) return false;
  if (finished_) return false;
  if (id == vocabulary_->eos()) {
    if (!accepting()) return false;
    state_->marks.push_back(state_->columns.size());
    finished_ = true;
    return true;
  }
  if (vocabulary_->special(id)) return false;
  return accept_bytes(vocabulary_->bytes(id));
}

void Matcher::rollback(int32_t tokens) {
  if (tokens < 0 || tokens > static_cast<int32_t>(state_->marks.size()))
    fail("grammar matcher: rollback of ", tokens, " tokens after ", state_->marks.size());
  for (int32_t i = 0; i < tokens; ++i) {
    state_->columns.resize(state_->marks.back());
    state_->marks.pop_back();
  }
  finished_ = false;  // EOS, if it was rolled back, pushed a mark like any token
}

bool Matcher::accepting() const { return state_->columns.back().accepting; }

Matcher::MaskCacheStats Matcher::mask_cache_stats() const { return grammar_->mask_cache_stats(); }

void Matcher::fill_mask(std::span<uint64_t> mask, bool cached) const {
  std::fill(mask.begin(), mask.end(), 0);
  if (!vocabulary_) return;
  if (static_cast<int64_t>(mask.size()) * 64 < vocabulary_->size())
    fail("grammar matcher: a mask of ", mask.size(), " words for ", vocabulary_->size(), " tokens");
  if (finished_) return;
  std::string key;
  if (cached) {
    state_->mask_key(key);
    if (grammar_->cached_mask(vocabulary_.get(), key, mask)) return;
  }
  walk_mask(mask);
  if (cached) grammar_->store_mask(vocabulary_.get(), key, mask);
}

void Matcher::walk_mask(std::span<uint64_t> mask) const {
  const auto set = [&](int32_t id) { mask[static_cast<std::size_t>(id) / 64] |= uint64_t{1} << (id % 64); };
  if (accepting() && vocabulary_->eos() >= 0) set(vocabulary_->eos());
  // Depth first over the trie, the parser advanced along the path; a node whose byte the
  // grammar rejects cuts its whole subtree. The state's columns grow and shrink like a stack.
  const auto& nodes = vocabulary_->nodes();
  const auto& edges = vocabulary_->edges();
  State& state = *state_;
  const std::size_t base = state.columns.size();
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
      if (!stack.empty()) state.columns.pop();
      continue;
    }
    const Vocabulary::Edge& edge = edges[static_cast<std::size_t>(node.first_edge + frame.next_edge++)];
    if (!state.advance(edge.byte)) continue;
    const Vocabulary::Node& child = nodes[static_cast<std::size_t>(edge.child)];
    for (int32_t id : vocabulary_->tokens_at(child)) set(id);
    stack.push_back({edge.child, 0});
  }
  if (state.columns.size() != base) fail("grammar matcher: the mask walk left the parser moved");
}

std::string Matcher::forced_bytes() const {
  std::string out;
  if (finished_) return out;
  State& state = *state_;
  const std::size_t base = state.columns.size();
  constexpr std::size_t kMaxForced = 256;
  while (out.size() < kMaxForced && !state.columns.back().accepting) {
    const ByteSet next = state.next_bytes();
    int count = 0;
    uint8_t only = 0;
    for (unsigned b = 0; b < 256 && count < 2; ++b)
      if (next.contains(static_cast<uint8_t>(b))) {
        ++count;
        only = static_cast<uint8_t>(b);
      }
    if (count != 1) break;
    state.advance(only);
    out += static_cast<char>(only);
  }
  state.columns.resize(base);
  return out;
}

bool matches(const Grammar& grammar, std::string_view text) {
  Matcher matcher(prepare(grammar), nullptr);
  return matcher.accept_bytes(text) && matcher.accepting();
}

}  // namespace deepinfer::grammar

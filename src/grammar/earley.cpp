#include "grammar/earley.h"

#include <map>
#include <numeric>
#include <tuple>

#include <algorithm>
#include <tuple>

#include "grammar/mask_walk.h"
#include "grammar/slice_closed_rules.h"

namespace deepinfer::grammar {

// ---- the prepared grammar ----

int64_t CompiledGrammar::table_bytes(const Grammar& grammar) {
  // A slot per symbol and one per production end (size() counts both), each a Next and a lhs;
  // a production's first slot and a rule's vector and nullable flag, and its two bytes in
  // SliceClosedRules once a mask walk asks.
  int64_t productions = 0;
  for (RuleId r = 0; r < grammar.rule_count(); ++r) productions += static_cast<int64_t>(grammar.alternatives(r).size());
  return grammar.size() * static_cast<int64_t>(sizeof(Next) + sizeof(RuleId)) +
         productions * static_cast<int64_t>(sizeof(uint32_t)) +
         grammar.rule_count() * static_cast<int64_t>(sizeof(std::vector<uint32_t>) + 3);
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
  // Byte classes by refinement: each terminal splits every class into its bytes inside and out.
  for (int32_t t = 0; t < grammar_.terminal_count(); ++t) {
    const ByteSet& set = grammar_.terminal_set(t);
    std::array<int16_t, 512> renumbered;
    renumbered.fill(-1);
    int count = 0;
    for (unsigned b = 0; b < 256; ++b) {
      const std::size_t split = std::size_t{byte_class_[b]} * 2 + (set.contains(static_cast<uint8_t>(b)) ? 1 : 0);
      if (renumbered[split] < 0) renumbered[split] = static_cast<int16_t>(count++);
      byte_class_[b] = static_cast<uint8_t>(renumbered[split]);
    }
    class_count_ = count;
  }
  for (int b = 255; b >= 0; --b) class_byte_[byte_class_[static_cast<std::size_t>(b)]] = static_cast<uint8_t>(b);
  for (int from = 0; from < text_slice::kStates; ++from)
    for (unsigned b = 0; b < 256; ++b) {
      const int to = text_slice::next(from, static_cast<uint8_t>(b));
      if (to == text_slice::kDead) continue;
      std::vector<SliceEdge>& edges = slice_edges_[static_cast<std::size_t>(from)];
      const bool met = std::any_of(edges.begin(), edges.end(), [&](const SliceEdge& e) {
        return e.slice_to == to && byte_class_[e.byte] == byte_class_[b];
      });
      if (!met) edges.push_back({static_cast<uint8_t>(b), static_cast<int8_t>(to)});
    }
  automaton_ = std::make_unique<KeyAutomaton>(class_count_);
  slice_closed_rules_ = std::make_unique<SliceClosedRules>(*this);
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

CompiledGrammar::~CompiledGrammar() = default;

bool CompiledGrammar::cached_mask(const Vocabulary* vocabulary, const std::string& key, std::span<uint64_t> mask) const {
  const std::lock_guard<std::mutex> lock(mask_cache_.mutex);
  if (mask_cache_.vocabulary != vocabulary || !mask_cache_.masks.find(key, mask)) {
    ++mask_cache_.stats.misses;
    return false;
  }
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
  mask_cache_.masks.store(key, mask);
}

std::shared_ptr<const CompiledGrammar> prepare(Grammar grammar) { return prepare(std::move(grammar), CompileLimits{}); }

std::shared_ptr<const CompiledGrammar> prepare(Grammar grammar, const CompileLimits& limits) {
  return std::make_shared<const CompiledGrammar>(std::move(grammar), limits);
}

int64_t prepared_bytes(const CompiledGrammar& grammar) { return grammar.bytes(); }

const std::vector<Grammar::Relaxation>& relaxations(const CompiledGrammar& grammar) {
  return grammar.grammar().relaxations();
}

// The masks it keeps, and the chart-key automaton its walks build (mask_walk.h bounds it).
int64_t mask_cache_bytes(int32_t tokens) {
  return static_cast<int64_t>(CompiledGrammar::kCachedMasks) * ((tokens + 63) / 64) * static_cast<int64_t>(sizeof(uint64_t)) +
         static_cast<int64_t>(KeyAutomaton::kDefaultMaxBytes);
}

std::shared_ptr<const std::vector<uint32_t>> CompiledGrammar::mask_aliases(std::size_t horizon) const {
  if (!grammar_.has_counted()) return nullptr;
  const std::lock_guard<std::mutex> lock(aliases_mutex_);
  if (aliases_ && aliases_horizon_ == horizon) return aliases_;
  auto aliases = std::make_shared<std::vector<uint32_t>>(slot_next_.size());
  std::iota(aliases->begin(), aliases->end(), uint32_t{0});
  // Counts past the horizon are one: within `horizon` bytes (so as many characters at most) a
  // rule `to_min` > horizon characters from its end cannot end, and one `to_max` > horizon
  // characters from its limit cannot reach it.
  const auto past = static_cast<int64_t>(std::min<std::size_t>(horizon, INT64_MAX - 1)) + 1;
  std::map<std::tuple<int32_t, int64_t, int64_t>, RuleId> first_of_class;
  const auto same_place = [&](const Symbol& a, const Symbol& b) {
    if (a == b) return true;
    if (!a.is_rule || !b.is_rule) return false;  // different terminals, or a terminal and a rule
    const int32_t family = grammar_.counted(a.index).family;
    return family >= 0 && family == grammar_.counted(b.index).family;
  };
  const auto alike = [&](RuleId a, RuleId b) {
    const std::vector<Sequence>& as = grammar_.alternatives(a);
    const std::vector<Sequence>& bs = grammar_.alternatives(b);
    if (as.size() != bs.size()) return false;
    for (std::size_t j = 0; j < as.size(); ++j)
      if (!std::equal(as[j].begin(), as[j].end(), bs[j].begin(), bs[j].end(), same_place)) return false;
    return true;
  };
  for (RuleId r = 0; r < grammar_.rule_count(); ++r) {
    const Grammar::Counted& counted = grammar_.counted(r);
    if (counted.family < 0) continue;
    const auto [found, added] = first_of_class.try_emplace(
        {counted.family, std::min(counted.to_min, past), counted.to_max < 0 ? -1 : std::min(counted.to_max, past)}, r);
    if (added || !alike(r, found->second)) continue;
    const std::span<const uint32_t> own = productions(r), first = productions(found->second);
    for (std::size_t j = 0; j < own.size(); ++j)
      for (std::size_t dot = 0; dot <= grammar_.alternatives(r)[j].size(); ++dot) (*aliases)[own[j] + dot] = first[j] + static_cast<uint32_t>(dot);
  }
  aliases_ = std::move(aliases);
  aliases_horizon_ = horizon;
  return aliases_;
}

// ---- Earley columns ----

namespace {
uint64_t key(const Item& item) { return (static_cast<uint64_t>(item.slot) << 32) | item.origin; }
}  // namespace

void Column::clear() {
  items.clear();
  scanners.clear();
  waiting.clear();
  predicted.clear();
  seen.clear();
  accepting = false;
}

void Column::add(const Item& item) {
  if (items.size() < kLinearItems) {
    if (std::find(items.begin(), items.end(), item) != items.end()) return;
    items.push_back(item);
    if (items.size() == kLinearItems)
      for (const Item& held : items) seen.emplace(key(held), 0);
    return;
  }
  if (seen.emplace(key(item), 0).second) items.push_back(item);
}

std::span<const std::pair<RuleId, Item>> Column::waiting_for(RuleId rule) const {
  const auto first = std::partition_point(waiting.begin(), waiting.end(),
                                          [&](const std::pair<RuleId, Item>& w) { return w.first < rule; });
  auto last = first;
  while (last != waiting.end() && last->first == rule) ++last;
  return {first, last};
}

bool Column::predict(RuleId rule) {
  if (std::find(predicted.begin(), predicted.end(), rule) != predicted.end()) return false;
  predicted.push_back(rule);
  return true;
}

// ---- the chart ----

Chart::Chart(const CompiledGrammar& g) : grammar(g) {
  Column& first = columns.push();
  for (uint32_t slot : grammar.productions(grammar.start())) first.add({slot, 0});
  first.predict(grammar.start());
  close(columns.size() - 1);
}

// Predictions and completions of column k until nothing changes (Aycock and Horspool's
// nullable rule: predicting a nullable rule also steps over it, so completions whose origin is
// this column need no second pass).
void Chart::close(std::size_t k) {
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
      for (const auto& waiting : from.waiting_for(lhs)) column.add({waiting.second.slot + 1, waiting.second.origin});
    } else if (next.is_rule) {
      column.waiting.emplace_back(next.index, item);
      if (column.predict(next.index))
        for (uint32_t slot : grammar.productions(next.index)) column.add({slot, static_cast<uint32_t>(k)});
      if (grammar.nullable(next.index)) column.add({item.slot + 1, item.origin});
    } else {
      column.scanners.push_back(item);
    }
  }
  std::sort(column.waiting.begin(), column.waiting.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first, a.second.slot, a.second.origin) < std::tie(b.first, b.second.slot, b.second.origin);
  });
}

bool Chart::advance(uint8_t byte) {
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

// New columns start from the last column's scanners; when an item completes, the items waiting
// for its rule in its origin column step over it. A waiting item whose rule is its last symbol (a
// tail: S -> "x" S in a right-linear rule, `string` at the end of `pair`) completes in turn at
// once, so what matters of it is where that chain of tails ends: the first waiting items that are
// not tails. So the key is: whether the last column accepts; each scanner's slot with the node
// (origin column, its rule); and for each node, the non-tail items its chains of tails end at,
// each with its own node, the nodes numbered in the order they are met. Which continuations the
// grammar accepts depends on nothing else (the tails' own completions only complete further, and
// whether a later column accepts does not change a mask), so two charts with equal keys get the
// same mask wherever in the output they stand: at every position of a string or a right-linear
// pattern, in each element of an array, in each string of the same property.
namespace {
uint64_t pair_key(std::size_t column, RuleId rule) {
  return (static_cast<uint64_t>(column) << 32) | static_cast<uint32_t>(rule);
}
}  // namespace

std::span<const Chart::ChainEnd> Chart::chain_ends(std::size_t column, RuleId rule) const {
  const uint64_t generation = columns[column].generation;
  const auto cached = chain_ends_.find(pair_key(column, rule));
  if (cached != chain_ends_.end() && cached->second.generation == generation)
    return std::span(chain_arena_).subspan(cached->second.first, cached->second.count);
  // The non-tail items that completing `rule` in `column` reaches, in the order met. The last
  // column's would not outlive the next step of a walk, so they go to scratch, not the cache.
  const bool kept = column + 1 < columns.size();
  std::vector<ChainEnd>& out = kept ? chain_arena_ : chain_scratch_;
  if (!kept) out.clear();
  const auto first = static_cast<uint32_t>(out.size());
  key_visiting_.clear();
  const auto follow = [&](auto& self, std::size_t at, RuleId completed) -> void {
    if (!key_visiting_.emplace(pair_key(at, completed), 0).second) return;
    for (const auto& waiting : columns[at].waiting_for(completed)) {
      const Item& parent = waiting.second;
      const uint32_t after = parent.slot + 1;
      if (grammar.next(after).index == CompiledGrammar::kComplete) {
        self(self, parent.origin, grammar.lhs(parent.slot));
      } else {
        out.push_back({after, parent.origin, grammar.lhs(parent.slot)});
      }
    }
  };
  follow(follow, column, rule);
  const auto count = static_cast<uint32_t>(out.size()) - first;
  if (kept) chain_ends_[pair_key(column, rule)] = {generation, first, count};
  return std::span(out).subspan(first, count);
}

void Chart::mask_key(std::string& key, std::span<const uint32_t> aliases) const {
  const auto written = [&](uint32_t slot) { return aliases.empty() ? slot : aliases[slot]; };
  // Entries of columns gone since (popped by walks and rollbacks) are dropped now and then; the
  // bound keeps a matcher's share small (~1 MiB).
  constexpr std::size_t kMaxChainArena = std::size_t{1} << 16, kMaxChainNodes = std::size_t{1} << 14;
  if (chain_arena_.size() > kMaxChainArena || chain_ends_.size() > kMaxChainNodes) {
    chain_arena_.clear();
    chain_ends_.clear();
  }
  key.clear();
  std::vector<KeyNode>& nodes = key_nodes_;
  std::vector<std::pair<uint32_t, uint32_t>>& ends = key_ends_;  // (slot after the dot, node)
  nodes.clear();
  key_node_ids_.clear();
  const auto node = [&](std::size_t column, RuleId rule) {
    const auto [id, inserted] = key_node_ids_.emplace(pair_key(column, rule), static_cast<uint32_t>(nodes.size()));
    if (inserted) nodes.push_back({column, rule});
    return id;
  };
  const auto put = [&](uint32_t value) { key.append(reinterpret_cast<const char*>(&value), sizeof value); };
  const Column& last = columns.back();
  put(last.accepting ? 1 : 0);
  put(static_cast<uint32_t>(last.scanners.size()));
  for (const Item& item : last.scanners) {
    put(written(item.slot));
    put(node(item.origin, grammar.lhs(item.slot)));
  }
  for (std::size_t n = 0; n < nodes.size(); ++n) {  // grows while it runs
    ends.clear();
    for (const ChainEnd& end : chain_ends(nodes[n].column, nodes[n].rule))
      ends.emplace_back(written(end.slot), node(end.column, end.rule));
    std::sort(ends.begin(), ends.end());
    ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
    put(static_cast<uint32_t>(ends.size()));
    for (const auto& [slot, child] : ends) {
      put(slot);
      put(child);
    }
  }
}

ByteSet Chart::next_bytes() const {
  ByteSet bytes;
  for (const Item& item : columns.back().scanners) bytes.add(grammar.terminal(grammar.next(item.slot).index));
  return bytes;
}

ByteSet Chart::bytes_like(uint8_t byte) const {
  ByteSet same = ByteSet::all();
  for (const Item& item : columns.back().scanners) {
    const ByteSet& set = grammar.terminal(grammar.next(item.slot).index);
    const ByteSet side = set.contains(byte) ? set : set.complement();
    for (std::size_t w = 0; w < same.words.size(); ++w) same.words[w] &= side.words[w];
  }
  return same;
}

}  // namespace deepinfer::grammar

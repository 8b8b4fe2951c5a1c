#pragma once
// A bounded map from chart keys to token masks that evicts the least recently used entry when
// full (CompiledGrammar's mask cache). Clearing the whole map when it filled, as the cache first
// did, threw away the hot masks of 32 concurrent sequences every few steps, each of which then
// paid a walk over the vocabulary again (docs/BENCHMARKS.md, "32 constrained vs 32
// unconstrained"). Not thread-safe: the cache holds its mutex around it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace deepinfer::grammar {

class LruMasks {
 public:
  explicit LruMasks(std::size_t capacity) : capacity_(capacity) {}

  // Copies key's mask into `mask` and marks it the most recently used; false (mask untouched)
  // when key is absent or its mask has another size.
  bool find(const std::string& key, std::span<uint64_t> mask) {
    const auto found = index_.find(key);
    if (found == index_.end() || found->second->second.size() != mask.size()) return false;
    entries_.splice(entries_.begin(), entries_, found->second);
    const std::vector<uint64_t>& stored = found->second->second;
    std::copy(stored.begin(), stored.end(), mask.begin());
    return true;
  }

  // Stores (or replaces) key's mask as the most recently used, evicting the least recently used
  // entry when the map is full.
  void store(const std::string& key, std::span<const uint64_t> mask) {
    if (capacity_ == 0) return;
    if (const auto found = index_.find(key); found != index_.end()) {
      found->second->second.assign(mask.begin(), mask.end());
      entries_.splice(entries_.begin(), entries_, found->second);
      return;
    }
    if (entries_.size() >= capacity_) {
      index_.erase(entries_.back().first);
      entries_.pop_back();
    }
    entries_.emplace_front(key, std::vector<uint64_t>(mask.begin(), mask.end()));
    index_.emplace(entries_.front().first, entries_.begin());
  }

  std::size_t size() const { return entries_.size(); }

 private:
  using Entry = std::pair<std::string, std::vector<uint64_t>>;
  std::size_t capacity_;
  std::list<Entry> entries_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace deepinfer::grammar

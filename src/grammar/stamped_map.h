#pragma once
// A hash map from 64-bit keys to 32-bit values for the parser's scratch lists (a column's item
// set, mask_key's nodes): open addressing, and clear() in constant time by a stamp, because a mask
// walk clears them once per trie node while their capacity stays.
#include <cstdint>
#include <utility>
#include <vector>

namespace deepinfer::grammar {

class StampedMap {
 public:
  // The value for `key`, inserting `value` when absent; second: whether it was inserted.
  std::pair<uint32_t, bool> emplace(uint64_t key, uint32_t value) {
    if (2 * (count_ + 1) > slots_.size()) grow();
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (slot.stamp != stamp_) {
        slot = {key, value, stamp_};
        ++count_;
        return {value, true};
      }
      if (slot.key == key) return {slot.value, false};
    }
  }
  void clear() {
    count_ = 0;
    if (++stamp_ == 0) {  // wrapped: no slot may look current
      for (Slot& slot : slots_) slot.stamp = 0;
      stamp_ = 1;
    }
  }

 private:
  struct Slot {
    uint64_t key;
    uint32_t value;
    uint32_t stamp;  // current when equal to stamp_
  };
  static std::size_t hash(uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<std::size_t>(key);
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{0, 0, 0});
    const uint32_t current = stamp_;
    stamp_ = 1;
    count_ = 0;
    for (const Slot& slot : old)
      if (slot.stamp == current) emplace(slot.key, slot.value);
  }

  std::vector<Slot> slots_;
  std::size_t count_ = 0;
  uint32_t stamp_ = 1;
};

}  // namespace deepinfer::grammar

#pragma once
// Open-addressing hash table from a token pair (two ids packed in 64 bits) to the merge's rank and
// the id of the merged token. BPE looks a pair up for every adjacent symbol pair, so this is the
// hottest structure in encoding.
#include <cstdint>
#include <vector>

namespace deepinfer::tokenizer {

struct Merge {
  uint32_t rank;
  int32_t merged_id;
};

class MergeTable {
 public:
  void reserve(std::size_t merges);
  // A later insert of the same pair replaces the earlier one (as a later entry of a hash map
  // built from the merges list does in the Hugging Face library).
  void insert(int32_t left, int32_t right, Merge merge);
  const Merge* find(int32_t left, int32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.key == key) return &slot.merge;
      if (slot.key == kEmpty) return nullptr;
    }
  }
  std::size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pack(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  static std::size_t hash(uint64_t key) {
    key ^= key >> 29;
    key *= 0xBF58476D1CE4E5B9ull;
    key ^= key >> 32;
    return static_cast<std::size_t>(key);
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace deepinfer::tokenizer

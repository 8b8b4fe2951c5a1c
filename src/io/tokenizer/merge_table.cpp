#include "io/tokenizer/merge_table.h"

#include <bit>

namespace deepinfer::tokenizer {

void MergeTable::reserve(std::size_t merges) {
  const std::size_t wanted = std::bit_ceil(merges * 2 + 16);  // load factor at most 1/2
  if (wanted <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(wanted, Slot{kEmpty, {}});
  mask_ = wanted - 1;
  size_ = 0;
  for (const Slot& slot : old) {
    if (slot.key != kEmpty) {
      insert(static_cast<int32_t>(slot.key >> 32), static_cast<int32_t>(slot.key & 0xFFFFFFFFu),
             slot.merge);
    }
  }
}

void MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  if ((size_ + 1) * 2 > slots_.size()) reserve(slots_.size() + 1);
  const uint64_t key = pack(left, right);
  for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.key == key) {
      slot.merge = merge;
      return;
    }
    if (slot.key == kEmpty) {
      slot = Slot{key, merge};
      ++size_;
      return;
    }
  }
}

}  // namespace deepinfer::tokenizer

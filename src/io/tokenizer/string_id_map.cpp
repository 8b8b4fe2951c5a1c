#include "io/tokenizer/string_id_map.h"

#include <bit>
#include <cstring>

namespace deepinfer::tokenizer {

uint64_t StringIdMap::hash(std::string_view key) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (key.size() * 0xFF51AFD7ED558CCDull);
  std::size_t i = 0;
  for (; i + 8 <= key.size(); i += 8) {
    uint64_t chunk;
    std::memcpy(&chunk, key.data() + i, 8);
    h = (h ^ chunk) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  if (i < key.size()) std::memcpy(&tail, key.data() + i, key.size() - i);
  h = (h ^ tail) * 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return h;
}

void StringIdMap::reserve(std::size_t entries) {
  const std::size_t wanted = std::bit_ceil(entries * 2 + 16);
  if (wanted <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(wanted, Slot{});
  for (const Slot& slot : old) {
    if (slot.id < 0) continue;
    std::size_t i = slot.hash & (slots_.size() - 1);
    while (slots_[i].id >= 0) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = slot;
  }
}

std::size_t StringIdMap::probe(std::string_view key, uint64_t h) const {
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& slot = slots_[i];
    if (slot.id < 0) return i;
    if (slot.hash == h && slot.length == key.size() &&
        std::memcmp(arena_.data() + slot.offset, key.data(), key.size()) == 0) {
      return i;
    }
  }
}

void StringIdMap::insert_or_assign(std::string_view key, int32_t id) {
  if ((size_ + 1) * 2 > slots_.size()) reserve(size_ + 1);
  const uint64_t h = hash(key);
  Slot& slot = slots_[probe(key, h)];
  if (slot.id < 0) {
    slot = Slot{h, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
    arena_.append(key);
    ++size_;
  } else {
    slot.id = id;
  }
}

std::optional<int32_t> StringIdMap::find(std::string_view key) const {
  if (slots_.empty()) return std::nullopt;
  const Slot& slot = slots_[probe(key, hash(key))];
  if (slot.id < 0) return std::nullopt;
  return slot.id;
}

}  // namespace deepinfer::tokenizer

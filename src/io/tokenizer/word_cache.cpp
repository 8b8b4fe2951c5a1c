#include "io/tokenizer/word_cache.h"

#include <array>
#include <cstring>
#include <memory>

namespace deepinfer::tokenizer {

std::size_t WordCache::Hash::operator()(std::string_view s) const noexcept {
  // 64-bit multiply-mix over 8-byte chunks: words are short, std::hash's byte loop is slower.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t chunk;
    std::memcpy(&chunk, s.data() + i, 8);
    h = (h ^ chunk) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  uint64_t tail = 0;
  if (i < s.size()) std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return static_cast<std::size_t>(h);
}

const std::vector<int32_t>* WordCache::find(std::string_view word) const {
  const auto it = entries_.find(word);
  return it == entries_.end() ? nullptr : &it->second;
}

void WordCache::insert(std::string_view word, std::span<const int32_t> ids) {
  if (word.size() >= kMaxWordBytes) return;
  if (entries_.size() >= kMaxEntries) entries_.clear();  // bounded memory; refills quickly
  entries_.emplace(std::string(word), std::vector<int32_t>(ids.begin(), ids.end()));
}

WordCache& WordCache::for_thread(uint64_t owner) {
  // A few slots so that alternating between tokenizers (tests, V3 and V4 side by side) does not
  // thrash; the least recently used slot is reused for a new owner.
  struct Slot {
    uint64_t owner = 0;
    uint64_t last_use = 0;
    std::unique_ptr<WordCache> cache;
  };
  thread_local std::array<Slot, 4> slots;
  thread_local uint64_t clock = 0;
  ++clock;
  Slot* victim = &slots[0];
  for (Slot& slot : slots) {
    if (slot.cache && slot.owner == owner) {
      slot.last_use = clock;
      return *slot.cache;
    }
    if (slot.last_use < victim->last_use) victim = &slot;
  }
  victim->owner = owner;
  victim->last_use = clock;
  victim->cache = std::make_unique<WordCache>();
  return *victim->cache;
}

}  // namespace deepinfer::tokenizer

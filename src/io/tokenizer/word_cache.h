#pragma once
// Cache of already-encoded words (pre-tokenized pieces), as the Hugging Face BPE keeps one.
// Text repeats words constantly, so most pieces skip the merge loop entirely. Each thread keeps its
// own caches (no locking on the hot path); a cache belongs to one tokenizer, named by a unique id.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace deepinfer::tokenizer {

class WordCache {
 public:
  // Words this long or longer are not cached (the library's limit too: long words are rare).
  static constexpr std::size_t kMaxWordBytes = 256;
  static constexpr std::size_t kMaxEntries = 1 << 16;

  // nullptr when absent; the span stays valid until the next insert.
  const std::vector<int32_t>* find(std::string_view word) const;
  void insert(std::string_view word, std::span<const int32_t> ids);

  // This thread's cache for the tokenizer with id `owner`.
  static WordCache& for_thread(uint64_t owner);

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept;
  };
  std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> entries_;
};

}  // namespace deepinfer::tokenizer

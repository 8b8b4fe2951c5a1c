#pragma once
// The BPE model: vocabulary, merge ranks and the merge loop that turns one pre-tokenized word into
// token ids, with the Hugging Face library's exact tie-breaking (lowest rank first, then leftmost).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/tokenizer/merge_table.h"
#include "io/tokenizer/string_id_map.h"
#include "io/tokenizer/word_cache.h"

namespace deepinfer::tokenizer {

struct BpeConfig {
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  // Throws deepinfer::Error naming `origin` for merges whose parts or result are not in the vocab.
  BpeModel(BpeConfig config, std::string_view origin);

  // Appends the ids of `word` to `ids`. With `byte_level`, `word` holds raw bytes still to be
  // spelled in the byte-level alphabet (that spelling is what the vocabulary holds); otherwise it
  // is matched character by character as it is. `cache` (may be null) remembers words.
  void encode_word(std::string_view word, bool byte_level, WordCache* cache,
                   std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Largest id in the vocabulary plus one (0 when empty).
  std::size_t id_limit() const { return id_to_token_.size(); }
  const std::string* id_to_token(int32_t id) const;

 private:
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t byte_length;
  };
  void initial_symbols(std::string_view word, bool byte_level, std::vector<Symbol>& symbols) const;
  void merge_all(std::vector<Symbol>& symbols) const;

  StringIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_known_;
  MergeTable merges_;
  std::array<int32_t, 256> byte_ids_{};  // id of each byte's byte-level character, -1 if none
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace deepinfer::tokenizer

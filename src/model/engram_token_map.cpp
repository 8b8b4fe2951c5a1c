#include "model/engram_token_map.h"

#include <string>
#include <unordered_map>

#include "model/engram_normalizer.h"

namespace deepinfer::model {

CompressedTokenMap build_compressed_token_map(const Tokenizer& tokenizer) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  const auto vocab = static_cast<int64_t>(tokenizer.vocab_size());
  CompressedTokenMap map;
  map.compressed_ids.resize(static_cast<std::size_t>(vocab));
  std::unordered_map<std::string, int32_t> key_to_id;
  key_to_id.reserve(static_cast<std::size_t>(vocab));
  for (int64_t id = 0; id < vocab; ++id) {
    const auto token_id = static_cast<TokenId>(id);
    const std::optional<std::string> token = tokenizer.id_to_token(token_id);
    if (!token) {
      // A hole in the added-token ids. The Hugging Face library packs added tokens without holes
      // (it renumbers them), so a hole must take no compressed id, or every later key would be
      // numbered one higher than the reference's and the size would disagree.
      map.compressed_ids[static_cast<std::size_t>(id)] = kNoCompressedId;
      continue;
    }
    std::string key;
    {
      const TokenId one[] = {token_id};
      const std::string text = tokenizer.decode(one, /*skip_special_tokens=*/false);
      if (text.find(kReplacement) != std::string::npos) {
        key = *token;
      } else {
        key = normalize_engram_key(text);
        if (key.empty()) key = text;
      }
    }
    const auto [it, inserted] = key_to_id.try_emplace(std::move(key), static_cast<int32_t>(key_to_id.size()));
    map.compressed_ids[static_cast<std::size_t>(id)] = it->second;
  }
  map.compressed_vocab_size = static_cast<int64_t>(key_to_id.size());
  return map;
}

}  // namespace deepinfer::model

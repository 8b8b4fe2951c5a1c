#include "api/prompt_tokens.h"

#include <algorithm>

#include "api/api_error.h"
#include "api/prompt_markers.h"
#include "core/error.h"

namespace deepinfer::api {

PromptEncoder::PromptEncoder(Tokenizer tokenizer, PromptFormat format)
    : tokenizer_(std::move(tokenizer)) {
  for (const markers::Marker& marker : markers::kAll) {
    if (format == PromptFormat::V4 && marker.text == markers::kSystem) continue;
    const std::optional<TokenId> id = tokenizer_.token_to_id(marker.text);
    if (id != marker.id) {
      fail("tokenizer: prompt marker \"", marker.text, "\" must be added token ", marker.id,
           id ? str_cat(", found id ", *id) : std::string(", not found"));
    }
    marker_ids_.emplace(std::string(marker.text), *id);
  }
}

std::vector<TokenId> PromptEncoder::encode(const RenderedPrompt& prompt) const {
  std::vector<TokenId> ids;
  for (const PromptPiece& piece : prompt.pieces) {
    if (piece.is_marker) {
      const auto found = marker_ids_.find(piece.text);
      if (found == marker_ids_.end()) fail("prompt: marker \"", piece.text, "\" has no token id");
      ids.push_back(found->second);
    } else {
      const std::vector<TokenId> text_ids = tokenizer_.encode_plain(piece.text);
      ids.insert(ids.end(), text_ids.begin(), text_ids.end());
    }
  }
  return ids;
}

std::vector<TokenId> encode_completion_prompt(const nlohmann::ordered_json& prompt,
                                              const Tokenizer& tokenizer) {
  if (prompt.is_string()) {
    const std::string& text = prompt.get_ref<const std::string&>();
    std::vector<TokenId> ids;
    const std::optional<TokenId> bos = tokenizer.bos_id();
    if (!bos) fail("tokenizer: no beginning-of-sentence token");
    const std::vector<TokenId> text_ids = tokenizer.encode(text);
    if (text_ids.empty() || text_ids.front() != *bos) ids.push_back(*bos);
    ids.insert(ids.end(), text_ids.begin(), text_ids.end());
    return ids;
  }
  if (prompt.is_array() && !prompt.empty() &&
      std::all_of(prompt.begin(), prompt.end(), [](const auto& v) { return v.is_number_integer(); })) {
    std::vector<TokenId> ids;
    const auto vocab = static_cast<int64_t>(tokenizer.vocab_size());
    for (const auto& value : prompt) {
      // Unsigned values above int64 range read as negative here and are refused with the rest.
      const int64_t id = value.is_number_unsigned()
                             ? (value.get<uint64_t>() > static_cast<uint64_t>(vocab) ? -1 : value.get<int64_t>())
                             : value.get<int64_t>();
      if (id < 0 || id >= vocab) {
        reject(str_cat("prompt: token id ", value.dump(), " is out of range [0, ", vocab, ")"), "prompt");
      }
      ids.push_back(static_cast<TokenId>(id));
    }
    return ids;
  }
  reject("prompt: expected a string or a non-empty array of token ids (one prompt per request)",
         "prompt");
}

}  // namespace deepinfer::api

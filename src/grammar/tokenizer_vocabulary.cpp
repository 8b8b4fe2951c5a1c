#include "grammar/tokenizer_vocabulary.h"

namespace deepinfer::grammar {

std::shared_ptr<const Vocabulary> vocabulary_for(const Tokenizer& tokenizer, std::optional<int32_t> eos) {
  const auto size = static_cast<int32_t>(tokenizer.vocab_size());
  std::vector<std::string> bytes(static_cast<std::size_t>(size));
  std::vector<int32_t> specials;
  for (int32_t id = 0; id < size; ++id) {
    if (!tokenizer.id_to_token(id)) continue;  // a hole in the id space: no bytes, never allowed
    if (tokenizer.is_special(id)) {
      specials.push_back(id);
      continue;
    }
    bytes[static_cast<std::size_t>(id)] = tokenizer.token_bytes(id);
  }
  const int32_t end = eos ? *eos : tokenizer.eos_id().value_or(-1);
  std::erase(specials, end);
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(specials), end);
}

}  // namespace deepinfer::grammar

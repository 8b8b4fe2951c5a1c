#include "io/tokenizer/tokenizer.h"

#include <filesystem>

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/tokenizer/tokenizer_impl.h"
#include "io/tokenizer/utf8.h"

namespace deepinfer {

void Tokenizer::Impl::encode(std::string_view text, std::vector<TokenId>& ids) const {
  tokenizer::WordCache& cache = tokenizer::WordCache::for_thread(cache_owner);
  added.split(
      text, [&](int32_t id) { ids.push_back(id); },
      [&](std::string_view piece) {
        pre_tokenizer.run(piece, [&](std::string_view word, bool byte_level) {
          model.encode_word(word, byte_level, &cache, ids);
        });
      });
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<TokenId>& ids) const {
  tokenizer::WordCache& cache = tokenizer::WordCache::for_thread(cache_owner);
  pre_tokenizer.run(text, [&](std::string_view word, bool byte_level) {
    model.encode_word(word, byte_level, &cache, ids);
  });
}

void Tokenizer::Impl::check_id(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= flags.size()) {
    fail(origin, ": token id ", id, " is out of range (vocabulary size ", flags.size(), ")");
  }
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path file = path;
  std::error_code error;
  if (fs::is_directory(file, error)) file /= "tokenizer.json";
  const std::string text = read_text_file(file.string());
  const fs::path config_path = file.parent_path() / "tokenizer_config.json";
  std::string config;
  const bool has_config = fs::is_regular_file(config_path, error);
  if (has_config) config = read_text_file(config_path.string());
  return Tokenizer(load_tokenizer(text, file.string(), has_config ? &config : nullptr, config_path.string()));
}

Tokenizer Tokenizer::from_json(std::string_view json, std::string_view origin) {
  return Tokenizer(load_tokenizer(json, origin, nullptr, ""));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  if (tokenizer::is_valid_utf8(text)) {
    impl_->encode(text, ids);
  } else {
    impl_->encode(tokenizer::utf8_lossy(text), ids);
  }
  return ids;
}

std::vector<TokenId> Tokenizer::encode_plain(std::string_view text) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  if (tokenizer::is_valid_utf8(text)) {
    impl_->encode_plain(text, ids);
  } else {
    impl_->encode_plain(tokenizer::utf8_lossy(text), ids);
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::string bytes;
  bool first = true;
  for (const TokenId id : ids) {
    impl_->check_id(id);
    if (!impl_->decodes(id, skip_special_tokens)) continue;
    if (impl_->decoder == DecoderKind::Join && !first) bytes.push_back(' ');
    first = false;
    bytes.append(impl_->decoded[static_cast<std::size_t>(id)]);
  }
  if (tokenizer::is_valid_utf8(bytes)) return bytes;
  return tokenizer::utf8_lossy(bytes);
}

std::size_t Tokenizer::vocab_size() const { return impl_->flags.size(); }

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(std::string(token)); it != impl_->added_ids.end()) return it->second;
  return impl_->model.token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->flags.size()) return std::nullopt;
  if (impl_->flags[static_cast<std::size_t>(id)] & Impl::kAdded) {
    for (const auto& token : impl_->added.tokens()) {
      if (token.id == id) return token.content;
    }
  }
  if (const std::string* token = impl_->model.id_to_token(id)) return *token;
  return std::nullopt;
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->flags.size() &&
         (impl_->flags[static_cast<std::size_t>(id)] & Impl::kSpecial);
}

std::optional<TokenId> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<TokenId> Tokenizer::eos_id() const { return impl_->eos; }

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : impl_(tokenizer.impl_), skip_special_tokens_(skip_special_tokens) {}

std::string Tokenizer::token_bytes(TokenId id) const {
  impl_->check_id(id);
  return impl_->decoded[static_cast<std::size_t>(id)];
}

std::string IncrementalDetokenizer::push(TokenId id) {
  impl_->check_id(id);
  if (!impl_->decodes(id, skip_special_tokens_)) return {};
  if (impl_->decoder == DecoderKind::Join && started_) pending_.push_back(' ');
  started_ = true;
  pending_.append(impl_->decoded[static_cast<std::size_t>(id)]);
  // Hold back only a character still waiting for its continuation bytes; anything else is final,
  // since a lossy decode never looks past the end of a complete or broken sequence.
  const std::size_t held = tokenizer::incomplete_utf8_suffix(pending_);
  const std::string_view ready = std::string_view(pending_).substr(0, pending_.size() - held);
  std::string out = tokenizer::is_valid_utf8(ready) ? std::string(ready) : tokenizer::utf8_lossy(ready);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out = tokenizer::utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace deepinfer

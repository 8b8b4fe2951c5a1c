#pragma once
// What a loaded tokenizer is made of; shared (immutable) by Tokenizer and IncrementalDetokenizer.
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/tokenizer/added_vocabulary.h"
#include "io/tokenizer/bpe_model.h"
#include "io/tokenizer/pre_tokenizer.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer {

enum class DecoderKind {
  Join,       // no decoder: tokens joined with spaces (the library's behaviour)
  ByteLevel,  // byte-level characters back to bytes, then a lossy UTF-8 decode
};

struct Tokenizer::Impl {
  Impl(std::string origin_name, tokenizer::BpeModel bpe_model)
      : origin(std::move(origin_name)), model(std::move(bpe_model)) {}

  std::string origin;
  tokenizer::AddedVocabulary added;
  tokenizer::PreTokenizer pre_tokenizer;
  tokenizer::BpeModel model;
  DecoderKind decoder = DecoderKind::ByteLevel;

  // Per id, indexed up to vocab_size(): what decoding the id appends (before the final lossy
  // UTF-8 pass), and flags.
  static constexpr uint8_t kKnown = 1, kSpecial = 2, kAdded = 4;
  std::vector<std::string> decoded;
  std::vector<uint8_t> flags;
  std::unordered_map<std::string, TokenId> added_ids;  // content -> id

  std::optional<TokenId> bos;
  std::optional<TokenId> eos;
  uint64_t cache_owner = 0;  // names this tokenizer's per-thread word caches

  // `text` must be valid UTF-8.
  void encode(std::string_view text, std::vector<TokenId>& ids) const;
  void encode_plain(std::string_view text, std::vector<TokenId>& ids) const;
  // Throws for ids outside [0, vocab_size()).
  void check_id(TokenId id) const;
  // Whether decoding shows the id at all (known, and not a skipped special token).
  bool decodes(TokenId id, bool skip_special_tokens) const {
    const uint8_t f = flags[static_cast<std::size_t>(id)];
    return (f & kKnown) && !(skip_special_tokens && (f & kSpecial));
  }
};

// Builds a tokenizer from tokenizer.json text; `config` is tokenizer_config.json when one was
// found (it names the BOS/EOS tokens). Throws deepinfer::Error naming `origin`.
std::shared_ptr<Tokenizer::Impl> load_tokenizer(std::string_view json, std::string_view origin,
                                                const std::string* config_json,
                                                const std::string& config_origin);

}  // namespace deepinfer

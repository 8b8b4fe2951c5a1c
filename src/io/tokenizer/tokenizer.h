#pragma once
// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json, with the same ids as the
// Hugging Face `tokenizers` library (0.23) for the DeepSeek V3/V4/V4.1 family and GPT-2-style files.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

using TokenId = int32_t;

class Tokenizer {
 public:
  // `path` is a tokenizer.json or a folder holding one (a model folder). Throws deepinfer::Error.
  static Tokenizer from_file(const std::string& path);
  // `origin` names the source in error messages.
  static Tokenizer from_json(std::string_view json, std::string_view origin = "tokenizer.json");

  // Text is UTF-8; invalid sequences are replaced by U+FFFD first (as a lossy UTF-8 decode does),
  // so any byte string encodes. Added tokens inside the text are recognised. No BOS is added.
  std::vector<TokenId> encode(std::string_view text) const;
  // As encode(), but added tokens are not recognised: the whole text goes through the
  // pre-tokenizer and BPE, so a user who types a control token's spelling gets ordinary text ids.
  std::vector<TokenId> encode_plain(std::string_view text) const;

  // Ids out of range throw. `skip_special_tokens` drops added tokens flagged special.
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;
  // The raw bytes one id decodes to, before any UTF-8 repair: a token holding part of a
  // multi-byte character gives that part. Ids out of range throw.
  std::string token_bytes(TokenId id) const;

  // Vocabulary plus added tokens: one more than the largest id.
  std::size_t vocab_size() const;
  std::optional<TokenId> token_to_id(std::string_view token) const;
  // The token's string as stored (byte-level alphabet for BPE tokens); nullopt when unknown.
  std::optional<std::string> id_to_token(TokenId id) const;
  bool is_special(TokenId id) const;
  // Beginning-of-sequence token: from tokenizer_config.json beside the file when present,
  // else the added token spelled like DeepSeek's or GPT-2's BOS.
  std::optional<TokenId> bos_id() const;
  std::optional<TokenId> eos_id() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class IncrementalDetokenizer;
};

// Streaming decode: feed ids one at a time, get text that is always whole UTF-8. Bytes of a
// character split across tokens are held back until the character completes; bytes that can never
// complete become U+FFFD exactly where decode() would put them, so the concatenation of every
// push() and finish() equals decode() of all ids.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(TokenId id);
  std::string finish();

 private:
  std::shared_ptr<const Tokenizer::Impl> impl_;
  bool skip_special_tokens_;
  std::string pending_;   // bytes not yet emitted
  bool started_ = false;  // some id has been shown (a decoder-less tokenizer joins with spaces)
};

}  // namespace deepinfer

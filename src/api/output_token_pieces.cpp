#include "api/output_token_pieces.h"

#include <utility>

namespace deepinfer::api {

TokenPieceDecoder::TokenPieceDecoder(const Tokenizer& tokenizer)
    : detokenizer_(tokenizer, /*skip_special_tokens=*/false) {}

std::optional<TextPiece> TokenPieceDecoder::push(TokenId id) {
  ++held_tokens_;
  std::string text = detokenizer_.push(id);
  if (text.empty()) return std::nullopt;
  TextPiece piece{std::move(text), held_tokens_};
  held_tokens_ = 0;
  return piece;
}

}  // namespace deepinfer::api

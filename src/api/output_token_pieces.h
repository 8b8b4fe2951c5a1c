#pragma once
// Turns the engine's token ids into the text pieces OutputProcessor takes: whole UTF-8, markers
// kept (they must reach the parser), each piece with the number of ids it took.
#include <cstdint>
#include <optional>
#include <string>

#include "io/tokenizer/tokenizer.h"

namespace deepinfer::api {

struct TextPiece {
  std::string text;
  int64_t tokens = 0;
};

class TokenPieceDecoder {
 public:
  explicit TokenPieceDecoder(const Tokenizer& tokenizer);
  // The text `id` completes, counting the ids held back for an incomplete character with it;
  // nullopt while the character is incomplete. Ids still held at the end of generation produced
  // no text and count for nothing (as in the recipe), so there is no finish().
  std::optional<TextPiece> push(TokenId id);

 private:
  IncrementalDetokenizer detokenizer_;
  int64_t held_tokens_ = 0;
};

}  // namespace deepinfer::api

#pragma once
// The text normalisation Engram keys tokens by (transformers deepseek_v41
// build_compressed_token_map), with the Hugging Face `tokenizers` semantics of each step:
// NFKC, NFD, StripAccents (drops every General_Category Mark: Mn, Mc and Me, as the library's
// is_combining_mark does), Lowercase (per character, full mapping: U+0130 -> "i" U+0307),
// whitespace runs [ \t\r\n]+ -> one space, a text that is exactly " " -> U+E000, Strip
// (Unicode White_Space on both ends), U+E000 -> " ". Unicode data: utf8proc.
#include <string>
#include <string_view>

namespace deepinfer::model {

// `text` must be valid UTF-8 (decoded text always is); throws deepinfer::Error otherwise.
std::string normalize_engram_key(std::string_view text);

}  // namespace deepinfer::model

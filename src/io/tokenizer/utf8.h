#pragma once
// UTF-8 helpers shared by the tokenizer pieces. Everything here works on bytes: the tokenizer's
// strings are UTF-8 and its byte-level tokens are arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

// Replaces every ill-formed sequence with U+FFFD using the "maximal subpart" rule of the WHATWG
// encoding standard (the rule Rust's String::from_utf8_lossy follows), so the result matches what
// the Hugging Face library sees when it is handed the same bytes.
std::string utf8_lossy(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

// Length of the well-formed prefix of `bytes` that could still grow into a valid character:
// returns how many trailing bytes form an incomplete (but so far valid) sequence, 0 when none.
std::size_t incomplete_utf8_suffix(std::string_view bytes);

// Decodes one character of valid UTF-8 at `pos`, advancing it.
char32_t next_codepoint(std::string_view text, std::size_t& pos);
// Decodes the last character of valid UTF-8 ending at `end`, moving `end` to its start.
char32_t previous_codepoint(std::string_view text, std::size_t& end);
// Byte length of the valid UTF-8 character starting with `lead`.
inline std::size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}
void append_utf8(std::string& out, char32_t codepoint);

// Unicode White_Space, the set Rust's char::is_whitespace and regex `\s` use.
bool is_unicode_whitespace(char32_t codepoint);

}  // namespace deepinfer::tokenizer

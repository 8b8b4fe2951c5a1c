#pragma once
// GPT-2's byte-level alphabet: every byte maps to one printable character so that BPE tokens are
// strings; printable ASCII and Latin-1 map to themselves, the other 68 bytes to U+0100 upwards.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& instance();

  char32_t char_for_byte(unsigned char byte) const { return byte_to_char_[byte]; }
  std::optional<unsigned char> byte_for_char(char32_t c) const;
  // UTF-8 spelling of the character for each byte, e.g. "Ġ" for ' '.
  std::string_view spelling(unsigned char byte) const { return spellings_[byte]; }

  // Appends the byte-level spelling of `raw` to `out`.
  void encode(std::string_view raw, std::string& out) const;
  // Maps a token's characters back to bytes; false (out unchanged) when some character is outside
  // the alphabet.
  bool decode(std::string_view token, std::string& out) const;

 private:
  ByteLevelAlphabet();
  std::array<char32_t, 256> byte_to_char_{};
  std::array<std::string, 256> spellings_;
  std::array<short, 324> char_to_byte_{};  // every mapped character is below U+0144; -1 = none
};

}  // namespace deepinfer::tokenizer

#include "io/tokenizer/byte_level.h"

#include "io/tokenizer/utf8.h"

namespace deepinfer::tokenizer {

const ByteLevelAlphabet& ByteLevelAlphabet::instance() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  char_to_byte_.fill(-1);
  const auto keeps_itself = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  char32_t next_shifted = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = keeps_itself(b) ? static_cast<char32_t>(b) : next_shifted++;
    byte_to_char_[b] = c;
    char_to_byte_[c] = static_cast<short>(b);
    append_utf8(spellings_[b], c);
  }
}

std::optional<unsigned char> ByteLevelAlphabet::byte_for_char(char32_t c) const {
  if (c >= char_to_byte_.size() || char_to_byte_[c] < 0) return std::nullopt;
  return static_cast<unsigned char>(char_to_byte_[c]);
}

void ByteLevelAlphabet::encode(std::string_view raw, std::string& out) const {
  for (const char byte : raw) out.append(spellings_[static_cast<unsigned char>(byte)]);
}

bool ByteLevelAlphabet::decode(std::string_view token, std::string& out) const {
  const std::size_t original_size = out.size();
  std::size_t pos = 0;
  while (pos < token.size()) {
    const auto byte = byte_for_char(next_codepoint(token, pos));
    if (!byte) {
      out.resize(original_size);
      return false;
    }
    out.push_back(static_cast<char>(*byte));
  }
  return true;
}

}  // namespace deepinfer::tokenizer

#include "io/tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the longest valid start of a sequence at `pos` (the "maximal subpart"), and whether
// it is a complete character. Follows Table 3-7 of the Unicode standard for the allowed ranges of
// the second byte.
struct Subpart {
  std::size_t length;
  bool complete;
};

Subpart maximal_subpart(std::string_view bytes, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(bytes[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {1, true};
  std::size_t needed = 0;
  unsigned char second_low = 0x80, second_high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 1;
  } else if (lead == 0xE0) {
    needed = 2, second_low = 0xA0;
  } else if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) {
    needed = 2;
  } else if (lead == 0xED) {
    needed = 2, second_high = 0x9F;
  } else if (lead == 0xF0) {
    needed = 3, second_low = 0x90;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    needed = 3;
  } else if (lead == 0xF4) {
    needed = 3, second_high = 0x8F;
  } else {
    return {1, false};  // 0x80..0xC1, 0xF5..0xFF never start a character
  }
  std::size_t length = 1;
  for (std::size_t k = 1; k <= needed; ++k) {
    if (pos + k >= bytes.size()) return {length, false};
    const unsigned char next = byte(pos + k);
    const unsigned char low = k == 1 ? second_low : 0x80;
    const unsigned char high = k == 1 ? second_high : 0xBF;
    if (next < low || next > high) return {length, false};
    ++length;
  }
  return {length, true};
}

}  // namespace

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    // Fast path for ASCII runs.
    std::size_t ascii_end = pos;
    while (ascii_end < bytes.size() && static_cast<unsigned char>(bytes[ascii_end]) < 0x80) ++ascii_end;
    out.append(bytes.substr(pos, ascii_end - pos));
    pos = ascii_end;
    if (pos == bytes.size()) break;
    const Subpart part = maximal_subpart(bytes, pos);
    if (part.complete) {
      out.append(bytes.substr(pos, part.length));
    } else {
      out.append(kReplacement);
    }
    pos += part.length;
  }
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const Subpart part = maximal_subpart(bytes, pos);
    if (!part.complete) return false;
    pos += part.length;
  }
  return true;
}

std::size_t incomplete_utf8_suffix(std::string_view bytes) {
  // A character is at most 4 bytes, so only the last 3 bytes can start an unfinished one.
  const std::size_t first = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (std::size_t start = first; start < bytes.size(); ++start) {
    const unsigned char lead = static_cast<unsigned char>(bytes[start]);
    if (lead < 0xC2 || lead > 0xF4) continue;  // not a byte that starts a multi-byte character
    const Subpart part = maximal_subpart(bytes, start);
    if (!part.complete && start + part.length == bytes.size()) return bytes.size() - start;
  }
  return 0;
}

char32_t next_codepoint(std::string_view text, std::size_t& pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return text[pos++] & 0x7F;
  if (lead < 0xE0) {
    const char32_t c = (char32_t{lead & 0x1Fu} << 6) | (byte(pos + 1) & 0x3F);
    pos += 2;
    return c;
  }
  if (lead < 0xF0) {
    const char32_t c = (char32_t{lead & 0x0Fu} << 12) | (char32_t{byte(pos + 1) & 0x3Fu} << 6) |
                       (byte(pos + 2) & 0x3F);
    pos += 3;
    return c;
  }
  const char32_t c = (char32_t{lead & 0x07u} << 18) | (char32_t{byte(pos + 1) & 0x3Fu} << 12) |
                     (char32_t{byte(pos + 2) & 0x3Fu} << 6) | (byte(pos + 3) & 0x3F);
  pos += 4;
  return c;
}

char32_t previous_codepoint(std::string_view text, std::size_t& end) {
  std::size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  std::size_t pos = start;
  const char32_t c = next_codepoint(text, pos);
  end = start;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool is_unicode_whitespace(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace deepinfer::tokenizer

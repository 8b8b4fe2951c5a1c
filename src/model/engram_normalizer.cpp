#include "model/engram_normalizer.h"

#include <cstdlib>

#include <utf8proc.h>

#include "core/error.h"

namespace deepinfer::model {
namespace {

constexpr char32_t kSentinel = 0xE000;  // private use: keeps a lone space alive through Strip

std::u32string to_code_points(std::string_view text) {
  std::u32string out;
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  utf8proc_ssize_t at = 0;
  const auto size = static_cast<utf8proc_ssize_t>(text.size());
  while (at < size) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t used = utf8proc_iterate(bytes + at, size - at, &cp);
    if (used <= 0) fail("Engram key normalisation: invalid UTF-8 at byte ", at);
    out.push_back(static_cast<char32_t>(cp));
    at += used;
  }
  return out;
}

std::string to_utf8(const std::u32string& text) {
  std::string out;
  utf8proc_uint8_t buffer[4];
  for (char32_t cp : text) {
    const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buffer);
    out.append(reinterpret_cast<const char*>(buffer), static_cast<std::size_t>(n));
  }
  return out;
}

// utf8proc_map with an explicit length: embedded NULs stay ordinary characters, and it does the
// canonical reordering of combining marks that per-character decomposition would skip.
std::string unicode_normalize(std::string_view text, utf8proc_option_t options) {
  if (text.empty()) return {};
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t length = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                               static_cast<utf8proc_ssize_t>(text.size()), &mapped, options);
  if (length < 0) fail("Engram key normalisation: ", utf8proc_errmsg(length));
  std::string out(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(length));
  std::free(mapped);
  return out;
}

bool is_mark(char32_t cp) {
  const utf8proc_category_t category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_MN || category == UTF8PROC_CATEGORY_MC || category == UTF8PROC_CATEGORY_ME;
}

// Unicode's White_Space property (what Rust's char::is_whitespace tests).
bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_collapsed_space(char32_t cp) { return cp == ' ' || cp == '\t' || cp == '\r' || cp == '\n'; }

}  // namespace

std::string normalize_engram_key(std::string_view text) {
  constexpr auto kNfkc = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  constexpr auto kNfd = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  const std::u32string decomposed = to_code_points(unicode_normalize(unicode_normalize(text, kNfkc), kNfd));

  std::u32string lowered;
  for (char32_t cp : decomposed) {
    if (is_mark(cp)) continue;
    if (cp == 0x130) {  // the one unconditional multi-character lowercase mapping
      lowered += U"i\u0307";
      continue;
    }
    lowered.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
  }

  std::u32string spaced;
  for (char32_t cp : lowered) {
    if (!is_collapsed_space(cp)) spaced.push_back(cp);
    else if (spaced.empty() || spaced.back() != ' ') spaced.push_back(' ');  // only runs put ' ' here
  }
  if (spaced == U" ") spaced = std::u32string(1, kSentinel);

  std::size_t begin = 0, end = spaced.size();
  while (begin < end && is_white_space(spaced[begin])) ++begin;
  while (end > begin && is_white_space(spaced[end - 1])) --end;
  std::u32string stripped = spaced.substr(begin, end - begin);
  for (char32_t& cp : stripped)
    if (cp == kSentinel) cp = ' ';
  return to_utf8(stripped);
}

}  // namespace deepinfer::model

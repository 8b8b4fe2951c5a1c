#pragma once
// Unicode sets exactly as the Hugging Face library's Oniguruma engine has them (derived from the library
// itself by tools/tokenizer_parity/make_unicode_tables.mjs; data in the generated unicode_tables.cpp).
// PCRE2's own Unicode data is older, so the regex layer spells these sets out as explicit ranges.
#include <optional>
#include <span>
#include <string_view>

namespace deepinfer::tokenizer::unicode {

struct CodePointRange {
  char32_t first;
  char32_t last;  // inclusive
};

// The Unicode version the ranges were inferred to come from, e.g. "16.0".
extern const char kUnicodeVersion[];

// Oniguruma's \s, \d, \w (Unicode).
std::span<const CodePointRange> white_space_escape();
std::span<const CodePointRange> digit_escape();
std::span<const CodePointRange> word_escape();

// A general category (L, Lu, ..., Cn, LC) or Alphabetic / White_Space, by its name as Oniguruma
// compares it: lower-case, without ' ', '_', '-'. nullopt for names the tables do not hold.
std::optional<std::span<const CodePointRange>> property_ranges(std::string_view normalized_name);

}  // namespace deepinfer::tokenizer::unicode

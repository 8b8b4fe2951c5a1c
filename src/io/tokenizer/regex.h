#pragma once
// PCRE2 (UTF + UCP, JIT) standing in for the Oniguruma engine the Hugging Face library uses.
// Patterns written for Oniguruma are translated where the two dialects differ, and matches are
// enumerated with Oniguruma's find_iter rule for empty matches, so splits come out the same.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "io/tokenizer/utf8.h"

namespace deepinfer::tokenizer {

struct MatchRange {
  std::size_t start;
  std::size_t end;
};

class Regex {
 public:
  // `origin` names the file and field in error messages. Throws deepinfer::Error.
  Regex(std::string_view oniguruma_pattern, std::string_view origin);
  // Matches `text` literally (the Split pre-tokenizer's String pattern).
  static Regex literal(std::string_view text, std::string_view origin);
  ~Regex();
  Regex(Regex&& other) noexcept;
  Regex& operator=(Regex&& other) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Finds the first match starting at or after `from` in `subject` (valid UTF-8); false if none.
  bool find(std::string_view subject, std::size_t from, MatchRange& match) const;

  // Calls `on_match(MatchRange)` for each match, left to right, like Oniguruma's find_iter: an
  // empty match right where the previous match ended is skipped by moving one character on.
  template <typename OnMatch>
  void for_each_match(std::string_view subject, OnMatch&& on_match) const {
    std::size_t search_from = 0;
    std::size_t last_match_end = std::string_view::npos;
    MatchRange match{};
    while (search_from <= subject.size() && find(subject, search_from, match)) {
      if (match.start == match.end && match.end == last_match_end) {
        search_from += search_from < subject.size()
                           ? utf8_length(static_cast<unsigned char>(subject[search_from]))
                           : 1;
        continue;
      }
      search_from = match.end;
      last_match_end = match.end;
      on_match(match);
    }
  }

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  // `written_pattern` is what error messages show (the translated one can be tens of kilobytes).
  void compile(std::string_view origin, std::string_view written_pattern);
  std::string pattern_;  // the PCRE2 pattern actually compiled
  void* code_ = nullptr; // pcre2_code_8
  bool jit_ = false;
};

// The Oniguruma pattern rewritten for PCRE2 (exposed for tests): set escapes (\p{..}, \s, \d, \w,
// \h and negations) become explicit classes from the library's own Unicode tables (unicode_tables.h).
std::string translate_oniguruma_pattern(std::string_view pattern);

}  // namespace deepinfer::tokenizer

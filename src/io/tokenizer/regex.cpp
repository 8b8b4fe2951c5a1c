#include "io/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <span>
#include <vector>

#include "core/error.h"
#include "io/tokenizer/unicode_tables.h"

namespace deepinfer::tokenizer {
namespace {

using unicode::CodePointRange;

// Oniguruma's \h is a hex digit; PCRE2's \h is horizontal white space.
constexpr CodePointRange kHexDigitRanges[] = {{'0', '9'}, {'A', 'F'}, {'a', 'f'}};

// An escape that stands for a set of characters: \p{..}, \P{..}, \s, \S, \d, \D, \w, \W, \h, \H.
struct SetEscape {
  std::span<const CodePointRange> ranges;
  bool negated = false;
  std::size_t length = 0;  // characters of the pattern it spans, backslash included
};

std::string normalized_property_name(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (c == ' ' || c == '_' || c == '-') continue;
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

// The set escape at pattern[at] (a backslash), or nullopt when it is something else, or a property
// the tables do not hold: those stay as written for PCRE2's own Unicode data (scripts such as \p{Han}).
std::optional<SetEscape> parse_set_escape(std::string_view pattern, std::size_t at) {
  const char kind = pattern[at + 1];
  switch (kind) {
    case 's': case 'S': return SetEscape{unicode::white_space_escape(), kind == 'S', 2};
    case 'd': case 'D': return SetEscape{unicode::digit_escape(), kind == 'D', 2};
    case 'w': case 'W': return SetEscape{unicode::word_escape(), kind == 'W', 2};
    case 'h': case 'H': return SetEscape{kHexDigitRanges, kind == 'H', 2};
    case 'p': case 'P': break;
    default: return std::nullopt;
  }
  if (at + 2 >= pattern.size() || pattern[at + 2] != '{') return std::nullopt;
  const std::size_t close = pattern.find('}', at + 3);
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view name = pattern.substr(at + 3, close - (at + 3));
  bool negated = kind == 'P';
  if (!name.empty() && name.front() == '^') {
    negated = !negated;
    name.remove_prefix(1);
  }
  const auto ranges = unicode::property_ranges(normalized_property_name(name));
  if (!ranges) return std::nullopt;
  return SetEscape{*ranges, negated, close + 1 - at};
}

// Every scalar value not in `ranges` (sorted, disjoint); surrogates never occur in UTF-8 text and
// PCRE2 refuses them in classes, so they are left out.
std::vector<CodePointRange> complement(std::span<const CodePointRange> ranges) {
  std::vector<CodePointRange> out;
  char32_t next = 0;
  const auto add = [&out](char32_t first, char32_t last) {
    if (first <= 0xD7FF && last >= 0xD800) {
      out.push_back({first, 0xD7FF});
      first = 0xE000;
    }
    if (first >= 0xD800 && first <= 0xDFFF) first = 0xE000;
    if (first <= last) out.push_back({first, last});
  };
  for (const CodePointRange& range : ranges) {
    if (range.first > next) add(next, range.first - 1);
    next = range.last + 1;
  }
  if (next <= 0x10FFFF) add(next, 0x10FFFF);
  return out;
}

void append_code_point(std::string& out, char32_t code_point) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "\\x{%X}", static_cast<unsigned>(code_point));
  out.append(buffer);
}

// Appends `ranges` as the body of a PCRE2 character class. PCRE2 tests a character against the
// ranges one by one in pattern order, so the widest (CJK, Hangul, ...) go first: most characters of
// a text then find their range after a few comparisons.
void append_class_body(std::string& out, std::span<const CodePointRange> ranges) {
  std::vector<CodePointRange> widest_first(ranges.begin(), ranges.end());
  std::stable_sort(widest_first.begin(), widest_first.end(), [](CodePointRange a, CodePointRange b) {
    return a.last - a.first > b.last - b.first;
  });
  for (const CodePointRange& range : widest_first) {
    append_code_point(out, range.first);
    if (range.last == range.first) continue;
    if (range.last > range.first + 1) out.push_back('-');
    append_code_point(out, range.last);
  }
}

std::string pcre2_error_text(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread match state: PCRE2 match data and a JIT stack large enough for long subjects.
struct MatchScratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  MatchScratch() {
    if (context && jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& match_scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

}  // namespace

std::string translate_oniguruma_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  int class_depth = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      // Sets come from the library's own Unicode tables (PCRE2's are older: new emoji would be
      // unassigned, and its \s has U+180E). Inside a class the ranges are spliced in, a negated set
      // as its complement, since a class cannot nest a negation.
      if (const std::optional<SetEscape> set = parse_set_escape(pattern, i)) {
        if (class_depth == 0) {
          out.append(set->negated ? "[^" : "[");
          append_class_body(out, set->ranges);
          out.push_back(']');
        } else if (set->negated) {
          append_class_body(out, complement(set->ranges));
        } else {
          append_class_body(out, set->ranges);
        }
        i += set->length - 1;
        continue;
      }
      // Oniguruma reads \p or \P without a brace as the plain letter; PCRE2 would take \pL as \p{L}.
      const bool brace_follows = i + 2 < pattern.size() && pattern[i + 2] == '{';
      if ((pattern[i + 1] == 'p' || pattern[i + 1] == 'P') && !brace_follows) {
        out.push_back(pattern[++i]);
        continue;
      }
      out.push_back('\\');
      out.push_back(pattern[++i]);
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal in both dialects.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

Regex::Regex(std::string_view oniguruma_pattern, std::string_view origin)
    : pattern_(translate_oniguruma_pattern(oniguruma_pattern)) {
  compile(origin, oniguruma_pattern);
}

Regex Regex::literal(std::string_view text, std::string_view origin) {
  Regex regex;
  for (const char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x80 && !std::isalnum(byte)) regex.pattern_.push_back('\\');
    regex.pattern_.push_back(c);
  }
  regex.compile(origin, text);
  return regex;
}

void Regex::compile(std::string_view origin, std::string_view written_pattern) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // MULTILINE: in Oniguruma ^ and $ are line anchors.
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error_code, &error_offset, nullptr);
  if (!code_) {
    fail(origin, ": cannot compile regex ", written_pattern, " (as PCRE2, at offset ", error_offset, "): ",
         pcre2_error_text(error_code));
  }
  jit_ = pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Regex::Regex(Regex&& other) noexcept
    : pattern_(std::move(other.pattern_)), code_(other.code_), jit_(other.jit_) {
  other.code_ = nullptr;
}

Regex& Regex::operator=(Regex&& other) noexcept {
  if (this != &other) {
    pcre2_code_free(static_cast<pcre2_code*>(code_));
    pattern_ = std::move(other.pattern_);
    code_ = other.code_;
    jit_ = other.jit_;
    other.code_ = nullptr;
  }
  return *this;
}

bool Regex::find(std::string_view subject, std::size_t from, MatchRange& match) const {
  MatchScratch& scratch = match_scratch();
  const auto* code = static_cast<const pcre2_code*>(code_);
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = jit_ ? pcre2_jit_match(code, text, subject.size(), from, 0, scratch.data, scratch.context)
                      : pcre2_match(code, text, subject.size(), from, PCRE2_NO_UTF_CHECK, scratch.data,
                                    scratch.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) fail("tokenizer regex: matching failed: ", pcre2_error_text(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data);
  match.start = ovector[0];
  match.end = ovector[1];
  return true;
}

}  // namespace deepinfer::tokenizer

#include "io/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>

#include "core/error.h"

namespace deepinfer::tokenizer {
namespace {

// Oniguruma's Unicode \w is the Unicode "word" set; PCRE2's UCP \w is letters, numbers and '_'.
constexpr std::string_view kWordClassBody = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}";
// Oniguruma's \h is a hex digit; PCRE2's \h is horizontal white space.
constexpr std::string_view kHexClassBody = "0-9a-fA-F";

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

std::string translate_oniguruma_pattern(std::string_view pattern, std::string_view origin) {
  std::string out;
  out.reserve(pattern.size() + 16);
  int class_depth = 0;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char escaped = pattern[i + 1];
      ++i;
      const bool negated = escaped == 'W' || escaped == 'H';
      if (escaped == 'w' || escaped == 'W' || escaped == 'h' || escaped == 'H') {
        const std::string_view body = (escaped == 'w' || escaped == 'W') ? kWordClassBody : kHexClassBody;
        if (class_depth == 0) {
          out.append(negated ? "[^" : "[").append(body).append("]");
        } else if (!negated) {
          out.append(body);
        } else {
          fail(origin, ": regex ", pattern, ": \\", escaped,
               " inside a character class is not supported");
        }
        continue;
      }
      out.push_back('\\');
      out.push_back(escaped);
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
    : pattern_(translate_oniguruma_pattern(oniguruma_pattern, origin)) {
  compile(origin);
}

Regex Regex::literal(std::string_view text, std::string_view origin) {
  Regex regex;
  for (const char c : text) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x80 && !std::isalnum(byte)) regex.pattern_.push_back('\\');
    regex.pattern_.push_back(c);
  }
  regex.compile(origin);
  return regex;
}

void Regex::compile(std::string_view origin) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // MULTILINE: in Oniguruma ^ and $ are line anchors.
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error_code, &error_offset, nullptr);
  if (!code_) {
    fail(origin, ": cannot compile regex ", pattern_, " at offset ", error_offset, ": ",
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
  if (rc < 0) fail("tokenizer regex ", pattern_, ": matching failed: ", pcre2_error_text(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.data);
  match.start = ovector[0];
  match.end = ovector[1];
  return true;
}

}  // namespace deepinfer::tokenizer

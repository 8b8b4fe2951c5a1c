#pragma once
// What the JSON schema tests share about instance text: whether a pretty-printed instance still
// fits the compiler's whitespace bound (JsonSchemaOptions::max_whitespace).
#include <algorithm>
#include <cstddef>
#include <string>

namespace deepinfer::grammar::testing {

// The longest run of JSON whitespace (space, tab, newline, carriage return) in `text`.
inline std::size_t longest_whitespace_run(const std::string& text) {
  std::size_t best = 0, run = 0;
  for (char c : text) {
    run = (c == ' ' || c == '\n' || c == '\t' || c == '\r') ? run + 1 : 0;
    best = std::max(best, run);
  }
  return best;
}

}  // namespace deepinfer::grammar::testing

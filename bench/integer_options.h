#pragma once
// Integer command-line values of the benchmarks that have a main() of their own: a value that is
// not an integer >= minimum is a usage error, reported through the benchmark's own usage().
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace deepinfer::bench {

using UsageError = void (*)(const std::string& message);  // prints and exits

inline int64_t parse_integer(const std::string& flag, const std::string& text, int64_t minimum, UsageError usage) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < minimum) {
    usage(flag + " " + text + ": expected an integer >= " + std::to_string(minimum));
    std::exit(2);
  }
  return value;
}

// A comma-separated list; zeros (where minimum allows them) are left out, so "--pp 0" means none.
inline std::vector<int64_t> parse_integer_list(const std::string& flag, const std::string& list, int64_t minimum,
                                               UsageError usage) {
  std::vector<int64_t> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const int64_t value = parse_integer(flag, list.substr(at, comma - at), minimum, usage);
    if (value != 0) out.push_back(value);
    at = comma + 1;
  }
  return out;
}

}  // namespace deepinfer::bench

#pragma once
// Errors that reach a user: one exception type whose message names what failed and where
// (file, tensor, field). Callers that can recover catch deepinfer::Error; anything else is a bug.
#include <sstream>
#include <stdexcept>
#include <string>

namespace deepinfer {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Concatenates its arguments with operator<< (GCC 12 has no std::format).
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(str_cat(args...));
}

}  // namespace deepinfer

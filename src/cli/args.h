#pragma once
// A small command-line parser shared by the subcommands: `--flag`, `--option VALUE`,
// `--option=VALUE` and positionals, with errors that tell the user what was wrong.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace deepinfer::cli {

// Thrown for a usage mistake; the subcommand prints it with its usage and exits with 2.
struct UsageError {
  std::string message;
};

class Args {
 public:
  // `flags` take no value, `options` take one. Throws UsageError for anything else.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& flags,
       const std::set<std::string>& options);

  bool has(const std::string& flag) const { return flags_.contains(flag); }
  std::optional<std::string> get(const std::string& option) const;
  // Typed values, `fallback` when the option is absent; a malformed value is a UsageError that
  // names the option and what it expects.
  int64_t count(const std::string& option, int64_t fallback, int64_t minimum = 0) const;  // integer >= minimum
  double number(const std::string& option, double fallback) const;                        // a real number
  int64_t bytes(const std::string& option, int64_t fallback) const;  // > 0: 4G, 512M, 64K or plain bytes
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::set<std::string> flags_;
  std::map<std::string, std::string> options_;
  std::vector<std::string> positionals_;
};

}  // namespace deepinfer::cli

#pragma once
// A small command-line parser shared by the subcommands: `--flag`, `--option VALUE`,
// `--option=VALUE` and positionals, with errors that tell the user what was wrong.
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
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::set<std::string> flags_;
  std::map<std::string, std::string> options_;
  std::vector<std::string> positionals_;
};

}  // namespace deepinfer::cli

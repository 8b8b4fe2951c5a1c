#include "cli/args.h"

namespace deepinfer::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& flags,
           const std::set<std::string>& options) {
  bool only_positionals = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (only_positionals || arg.size() < 2 || arg[0] != '-') {
      positionals_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_positionals = true;
      continue;
    }
    std::string name = arg;
    std::optional<std::string> inline_value;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    if (flags.contains(name)) {
      if (inline_value) throw UsageError{name + " takes no value"};
      flags_.insert(name);
    } else if (options.contains(name)) {
      if (inline_value) {
        options_[name] = *inline_value;
      } else if (i + 1 < argv.size()) {
        options_[name] = argv[++i];
      } else {
        throw UsageError{name + " needs a value"};
      }
    } else {
      throw UsageError{"unknown option " + name};
    }
  }
}

std::optional<std::string> Args::get(const std::string& option) const {
  auto it = options_.find(option);
  if (it == options_.end()) return std::nullopt;
  return it->second;
}

}  // namespace deepinfer::cli

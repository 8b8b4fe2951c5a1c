#include "cli/args.h"

#include <stdexcept>

namespace deepinfer::cli {
namespace {

// How many leading characters of `text` `parse` (std::stoll or std::stod) reads into `value`; 0
// when it reads none or the number is out of range.
template <typename T, typename Parse>
std::size_t read_number(const std::string& text, Parse parse, T& value) {
  std::size_t used = 0;
  try {
    value = parse(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  return used;
}

long long to_integer(const std::string& text, std::size_t* used) { return std::stoll(text, used); }
double to_real(const std::string& text, std::size_t* used) { return std::stod(text, used); }

}  // namespace

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

int64_t Args::count(const std::string& option, int64_t fallback, int64_t minimum) const {
  const auto text = get(option);
  if (!text) return fallback;
  long long value = 0;
  const std::size_t used = read_number(*text, to_integer, value);
  if (used == 0 || used != text->size() || value < minimum)
    throw UsageError{option + " expects an integer >= " + std::to_string(minimum) + ", got '" + *text + "'"};
  return value;
}

double Args::number(const std::string& option, double fallback) const {
  const auto text = get(option);
  if (!text) return fallback;
  double value = 0;
  const std::size_t used = read_number(*text, to_real, value);
  if (used == 0 || used != text->size()) throw UsageError{option + " expects a number, got '" + *text + "'"};
  return value;
}

int64_t Args::bytes(const std::string& option, int64_t fallback) const {
  const auto text = get(option);
  if (!text) return fallback;
  double value = 0;
  std::size_t used = read_number(*text, to_real, value);
  double scale = 1;
  if (used > 0 && used + 1 == text->size()) {
    switch ((*text)[used]) {
      case 'K': case 'k': scale = 1024.0; break;
      case 'M': case 'm': scale = 1024.0 * 1024; break;
      case 'G': case 'g': scale = 1024.0 * 1024 * 1024; break;
      default: used = 0;
    }
    if (used > 0) ++used;
  }
  if (used == 0 || used != text->size() || !(value > 0) || value * scale > 9.0e18)
    throw UsageError{option + " expects a size such as 4G or 512M, got '" + *text + "'"};
  return static_cast<int64_t>(value * scale);
}

}  // namespace deepinfer::cli

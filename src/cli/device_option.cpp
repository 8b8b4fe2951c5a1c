#include "cli/device_option.h"

#include <cctype>
#include <string_view>

namespace deepinfer::cli {
namespace {

// "cpu", "cuda", "cuda:N" (N digits), "auto" or "" (the default).
bool well_formed(const std::string& text) {
  if (text.empty() || text == "cpu" || text == "cuda" || text == "auto") return true;
  constexpr std::string_view kCuda = "cuda:";
  if (text.size() <= kCuda.size() || text.compare(0, kCuda.size(), kCuda) != 0) return false;
  for (std::size_t i = kCuda.size(); i < text.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
  return text.size() - kCuda.size() <= 6;
}

}  // namespace

std::string device_option(const Args& args) {
  const auto text = args.get("--device");
  if (!text) return "";
  if (!well_formed(*text)) throw UsageError{"--device expects cpu, cuda or cuda:N, got '" + *text + "'"};
  return *text;
}

backend::DeviceSpec device_spec(const Args& args) {
  backend::DeviceSpec spec = backend::parse_device(device_option(args));
  spec.cuda_graphs = !args.has("--enforce-eager");
  spec.batch_invariant = args.has("--batch-invariant");
  return spec;
}

}  // namespace deepinfer::cli

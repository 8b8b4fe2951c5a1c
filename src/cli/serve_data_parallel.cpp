#include "cli/serve_data_parallel.h"

#include <algorithm>
#include <thread>

namespace deepinfer::cli {

std::vector<RankPlacement> place_ranks(int ranks, const std::string& device_option, const backend::DeviceSpec& spec,
                                       int threads) {
  std::vector<RankPlacement> out(static_cast<std::size_t>(ranks));
  if (spec.kind == backend::DeviceSpec::Kind::Cuda) {
    const bool pinned = device_option.rfind("cuda:", 0) == 0;
    const int devices = std::max(1, backend::cuda_device_count());
    for (int r = 0; r < ranks; ++r)
      out[static_cast<std::size_t>(r)].device = "cuda:" + std::to_string(pinned ? spec.index : r % devices);
  } else {
    const int total = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (RankPlacement& placement : out) {
      placement.device = "cpu";
      placement.threads = std::max(1, total / ranks);
    }
  }
  return out;
}

std::vector<std::string> rank_arguments(const std::vector<std::string>& argv, const std::set<std::string>& valued,
                                        const RankPlacement& placement) {
  static const std::set<std::string> kept_by_front = {"--data-parallel", "--host", "--port", "--device", "--threads",
                                                      "--api-key", "--keep-alive-timeout", "--max-connections"};
  std::vector<std::string> out = {"serve"};
  bool only_positionals = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (only_positionals || arg == "--" || arg.rfind("--", 0) != 0) {
      only_positionals |= arg == "--";
      out.push_back(arg);
      continue;
    }
    const std::size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const bool takes_next = eq == std::string::npos && valued.contains(name);
    if (kept_by_front.contains(name)) {
      if (takes_next) ++i;
      continue;
    }
    out.push_back(arg);
    if (takes_next && i + 1 < argv.size()) out.push_back(argv[++i]);
  }
  out.insert(out.end(), {"--host", "127.0.0.1", "--port", "0", "--device", placement.device, "--keep-alive-timeout",
                         "3600"});
  if (placement.device == "cpu") out.insert(out.end(), {"--threads", std::to_string(placement.threads)});
  return out;
}

}  // namespace deepinfer::cli

// The data-parallel front's merge of its ranks' /metrics texts (server/metrics_merge.h): the
// input split at its first NUL into two ranks' texts. Whatever they hold, the merge must return,
// every line it writes must end with a newline, and no family may get two HELP lines.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "server/metrics_merge.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace deepinfer::server;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::size_t split = text.find('\0');
  std::vector<RankMetrics> ranks = {{0, text.substr(0, split)}};
  if (split != std::string::npos) ranks.push_back({7, text.substr(split + 1)});
  const std::string merged = merge_rank_metrics(ranks);
  if (!merged.empty() && merged.back() != '\n') std::abort();
  std::set<std::string> helped;
  std::string_view rest = merged;
  while (!rest.empty()) {
    const std::size_t end = rest.find('\n');
    const std::string_view line = rest.substr(0, end);
    rest = rest.substr(end + 1);
    if (line.substr(0, 7) == "# HELP " && !helped.insert(std::string(line.substr(7, line.find(' ', 7) - 7))).second)
      std::abort();
  }
  return 0;
}

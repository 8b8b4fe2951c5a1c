#pragma once
// The front of attention data parallelism (issue 16): which rank (one GPU's engine, with its own
// cache and prefix cache) a new request goes to. The policy of SGLang's cache-aware router, over
// full blocks of prompt tokens: while the ranks' loads are balanced, a request goes to the rank
// most likely to hold the longest prefix of its prompt (by the router's own record of what it
// sent where), when that prefix covers at least `affinity_fraction` of the prompt's full blocks;
// otherwise, and whenever the loads are out of balance (max - min > balance_margin and
// max > balance_ratio * min), to the least-loaded rank. Ties go to the lower load, then to the
// rank with fewer recorded blocks (so idle ranks' caches fill evenly), then to the lower rank, so
// the same requests and loads always give the same routes.
//
// The record is approximate by design: a rank's prefix cache evicts on its own, and the router
// forgets each rank's least recently routed blocks past `blocks_per_rank`. A wrong guess costs a
// prefill, never a wrong answer.
#include <cstdint>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace deepinfer::parallel {

struct RankRouterOptions {
  int64_t block_tokens = 64;         // as the ranks' prefix caches
  double affinity_fraction = 0.5;    // of the prompt's full blocks
  int64_t balance_margin = 32;       // in load units (a rank's running + queued requests)
  double balance_ratio = 1.0001;
  int64_t blocks_per_rank = 1 << 20;
};

class RankRouter {
 public:
  explicit RankRouter(int64_t ranks, RankRouterOptions options = {});

  // loads[r]: rank r's load now (running + queued requests, as it reports them); up[r]: whether
  // rank r takes requests now (empty: every rank does; at least one must). Returns the rank for
  // `prompt` and records its full blocks there.
  int64_t route(std::span<const int32_t> prompt, std::span<const int64_t> loads, const std::vector<bool>& up = {});

  // Rank `rank` restarted with an empty cache: nothing is recorded there any more.
  void forget(int64_t rank);

  // The prompt's leading full blocks the router has recorded on `rank`.
  int64_t recorded_prefix_blocks(int64_t rank, std::span<const int32_t> prompt) const;

 private:
  std::vector<uint64_t> block_chain(std::span<const int32_t> prompt) const;
  int64_t matched_blocks(int64_t rank, const std::vector<uint64_t>& chain) const;
  void record(int64_t rank, const std::vector<uint64_t>& chain);

  RankRouterOptions options_;
  std::vector<std::unordered_map<uint64_t, int64_t>> last_use_;  // per rank: block chain hash -> tick
  std::vector<std::set<std::pair<int64_t, uint64_t>>> by_age_;   // per rank: (tick, hash), oldest first
  int64_t tick_ = 0;
};

}  // namespace deepinfer::parallel

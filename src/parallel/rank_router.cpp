#include "parallel/rank_router.h"

#include <algorithm>
#include <cstddef>

#include "core/error.h"
#include "core/int_math.h"

namespace deepinfer::parallel {
RankRouter::RankRouter(int64_t ranks, RankRouterOptions options)
    : options_(options), last_use_(static_cast<std::size_t>(std::max<int64_t>(ranks, 0))),
      by_age_(static_cast<std::size_t>(std::max<int64_t>(ranks, 0))) {
  if (ranks <= 0) fail("rank router: ", ranks, " ranks");
  if (options_.block_tokens <= 0) fail("rank router: blocks of ", options_.block_tokens, " tokens");
  if (options_.blocks_per_rank <= 0) fail("rank router: a record of ", options_.blocks_per_rank, " blocks a rank");
}

std::vector<uint64_t> RankRouter::block_chain(std::span<const int32_t> prompt) const {
  std::vector<uint64_t> chain;
  const auto blocks = static_cast<int64_t>(prompt.size()) / options_.block_tokens;
  uint64_t hash = 0x9E3779B97F4A7C15ull;  // a block's hash chains its predecessor's with its tokens
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t i = 0; i < options_.block_tokens; ++i)
      hash = splitmix64_mix(hash + static_cast<uint32_t>(prompt[static_cast<std::size_t>(b * options_.block_tokens + i)]));
    chain.push_back(hash);
  }
  return chain;
}

int64_t RankRouter::matched_blocks(int64_t rank, const std::vector<uint64_t>& chain) const {
  const auto& blocks = last_use_[static_cast<std::size_t>(rank)];
  int64_t matched = 0;
  while (matched < static_cast<int64_t>(chain.size()) && blocks.contains(chain[static_cast<std::size_t>(matched)]))
    ++matched;
  return matched;
}

void RankRouter::record(int64_t rank, const std::vector<uint64_t>& chain) {
  auto& blocks = last_use_[static_cast<std::size_t>(rank)];
  auto& ages = by_age_[static_cast<std::size_t>(rank)];
  ++tick_;
  for (const uint64_t hash : chain) {
    if (auto found = blocks.find(hash); found != blocks.end()) {
      ages.erase({found->second, hash});
      found->second = tick_;
    } else {
      blocks.emplace(hash, tick_);
    }
    ages.emplace(tick_, hash);
  }
  while (static_cast<int64_t>(blocks.size()) > options_.blocks_per_rank) {
    blocks.erase(ages.begin()->second);
    ages.erase(ages.begin());
  }
}

int64_t RankRouter::route(std::span<const int32_t> prompt, std::span<const int64_t> loads,
                          const std::vector<bool>& up) {
  const auto ranks = static_cast<int64_t>(last_use_.size());
  if (static_cast<int64_t>(loads.size()) != ranks) fail("rank router: ", loads.size(), " loads for ", ranks, " ranks");
  if (!up.empty() && static_cast<int64_t>(up.size()) != ranks) fail("rank router: ", up.size(), " states for ", ranks, " ranks");
  auto taking = [&up](int64_t r) { return up.empty() || up[static_cast<std::size_t>(r)]; };
  auto load = [&loads](int64_t r) { return loads[static_cast<std::size_t>(r)]; };
  // Among the least loaded, the rank with the smallest record: at low load (every rank idle
  // between requests) new prefixes then spread over the ranks' caches instead of all filling the
  // first one.
  auto recorded = [this](int64_t r) { return static_cast<int64_t>(last_use_[static_cast<std::size_t>(r)].size()); };
  int64_t least = -1, most = -1;
  for (int64_t r = 0; r < ranks; ++r) {
    if (!taking(r)) continue;
    if (least < 0 || load(r) < load(least) || (load(r) == load(least) && recorded(r) < recorded(least))) least = r;
    if (most < 0 || load(r) > load(most)) most = r;
  }
  if (least < 0) fail("rank router: no rank takes requests");
  const auto low = static_cast<double>(load(least));
  const auto high = static_cast<double>(load(most));
  const bool imbalanced =
      high - low > static_cast<double>(options_.balance_margin) && high > options_.balance_ratio * low;
  const std::vector<uint64_t> chain = block_chain(prompt);
  int64_t chosen = least;
  if (!imbalanced && !chain.empty()) {
    int64_t best = -1, best_matched = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      if (!taking(r)) continue;
      const int64_t matched = matched_blocks(r, chain);
      if (matched > best_matched || (matched == best_matched && best >= 0 && load(r) < load(best))) {
        best = r;
        best_matched = matched;
      }
    }
    if (best >= 0 &&
        static_cast<double>(best_matched) >= options_.affinity_fraction * static_cast<double>(chain.size()))
      chosen = best;
  }
  record(chosen, chain);
  return chosen;
}

void RankRouter::forget(int64_t rank) {
  if (rank < 0 || rank >= static_cast<int64_t>(last_use_.size())) fail("rank router: no rank ", rank);
  last_use_[static_cast<std::size_t>(rank)].clear();
  by_age_[static_cast<std::size_t>(rank)].clear();
}

int64_t RankRouter::recorded_prefix_blocks(int64_t rank, std::span<const int32_t> prompt) const {
  if (rank < 0 || rank >= static_cast<int64_t>(last_use_.size())) fail("rank router: no rank ", rank);
  return matched_blocks(rank, block_chain(prompt));
}

}  // namespace deepinfer::parallel

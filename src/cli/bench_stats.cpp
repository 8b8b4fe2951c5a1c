#include "cli/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace deepinfer::cli::bench {

std::optional<double> tpot_seconds(const RequestResult& result) {
  if (!result.ok || result.output_tokens < 2) return std::nullopt;
  return (result.latency_s - result.ttft_s) / static_cast<double>(result.output_tokens - 1);
}

std::optional<double> percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(rank));
  const std::size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = rank - static_cast<double>(below);
  return values[below] + (values[above] - values[below]) * fraction;
}

Distribution describe(std::span<const double> values) {
  Distribution out;
  out.count = values.size();
  if (values.empty()) return out;
  std::vector<double> copy(values.begin(), values.end());
  out.mean = std::accumulate(copy.begin(), copy.end(), 0.0) / static_cast<double>(copy.size());
  out.p50 = *percentile(copy, 50);
  out.p90 = *percentile(copy, 90);
  out.p99 = *percentile(copy, 99);
  out.max = *std::max_element(copy.begin(), copy.end());
  return out;
}

RunSummary summarize(std::span<const RequestResult> results, double duration_s) {
  RunSummary out;
  out.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2el;
  constexpr double kMs = 1000.0;
  for (const auto& result : results) {
    if (!result.ok) {
      ++out.failed;
      ++out.errors[result.error];
      continue;
    }
    ++out.completed;
    out.prompt_tokens += result.prompt_tokens;
    out.output_tokens += result.output_tokens;
    out.cached_prompt_tokens += result.cached_prompt_tokens;
    if (!result.usage_reported) ++out.without_usage;
    ttft.push_back(result.ttft_s * kMs);
    e2el.push_back(result.latency_s * kMs);
    if (auto t = tpot_seconds(result)) tpot.push_back(*t * kMs);
    for (double gap : result.itl_s) itl.push_back(gap * kMs);
  }
  if (duration_s > 0) {
    out.request_throughput = static_cast<double>(out.completed) / duration_s;
    out.output_throughput = static_cast<double>(out.output_tokens) / duration_s;
    out.total_token_throughput = static_cast<double>(out.prompt_tokens + out.output_tokens) / duration_s;
  }
  if (out.prompt_tokens > 0)
    out.prefix_cache_hit_rate = static_cast<double>(out.cached_prompt_tokens) / static_cast<double>(out.prompt_tokens);
  out.ttft_ms = describe(ttft);
  out.tpot_ms = describe(tpot);
  out.itl_ms = describe(itl);
  out.e2el_ms = describe(e2el);
  return out;
}

}  // namespace deepinfer::cli::bench

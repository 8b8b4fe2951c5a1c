#include "engine/verify_schedule.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

// Cumulative survivals of one row: products in position order, in double.
std::vector<double> survivals(std::span<const float> confidences, int64_t draft_length, const char* what) {
  if (static_cast<int64_t>(confidences.size()) != draft_length)
    fail(what, ": a row of ", confidences.size(), " confidences for a draft length of ", draft_length);
  std::vector<double> out(confidences.size());
  double product = 1.0;
  for (std::size_t j = 0; j < confidences.size(); ++j) {
    const float c = confidences[j];
    if (!(c >= 0.0f && c <= 1.0f)) fail(what, ": confidence ", c, " at position ", j, " is outside [0, 1]");
    product *= c;
    out[j] = product;
  }
  return out;
}

}  // namespace

StepRateTable::StepRateTable(std::vector<int64_t> tokens, std::vector<double> steps_per_second)
    : tokens_(std::move(tokens)), rates_(std::move(steps_per_second)) {
  if (tokens_.size() != rates_.size())
    fail("step rate table: ", tokens_.size(), " probe counts and ", rates_.size(), " rates");
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    if (i > 0 && tokens_[i] <= tokens_[i - 1]) fail("step rate table: probe counts must increase");
    if (!(rates_[i] > 0.0) || !std::isfinite(rates_[i])) fail("step rate table: rate ", rates_[i], " is not positive");
  }
}

double StepRateTable::steps_per_second(int64_t tokens) const {
  if (tokens_.empty()) return 1.0;
  const auto after = std::upper_bound(tokens_.begin(), tokens_.end(), tokens);
  const std::size_t i = after == tokens_.begin() ? 0 : static_cast<std::size_t>(after - tokens_.begin()) - 1;
  return rates_[i];
}

int64_t verify_budget(std::span<const std::optional<std::vector<float>>> lagged, int64_t draft_length,
                      const StepRateTable& table) {
  if (draft_length < 0) fail("verify_budget: negative draft length ", draft_length);
  std::vector<double> candidates;
  for (const std::optional<std::vector<float>>& row : lagged) {
    if (!row) {
      candidates.insert(candidates.end(), static_cast<std::size_t>(draft_length), 1.0);
      continue;
    }
    for (const double a : survivals(*row, draft_length, "verify_budget"))
      if (a >= kSurvivalFloor) candidates.push_back(a);
  }
  const auto n_max = static_cast<int64_t>(candidates.size());
  if (table.empty()) return n_max;
  std::sort(candidates.begin(), candidates.end(), std::greater<>());
  const auto requests = static_cast<int64_t>(lagged.size());
  double expected = static_cast<double>(requests);  // every request's anchor gives one token
  int64_t best = 0;
  double best_throughput = expected * table.steps_per_second(requests);
  for (int64_t n = 1; n <= n_max; ++n) {
    expected += candidates[static_cast<std::size_t>(n - 1)];
    const double throughput = expected * table.steps_per_second(requests + n);
    if (throughput > best_throughput) {  // strictly: the first maximum wins
      best_throughput = throughput;
      best = n;
    }
  }
  return best;
}

std::vector<int32_t> allocate_verify_lengths(std::span<const std::vector<float>> confidences, int64_t draft_length,
                                             int64_t budget) {
  if (budget < 0) fail("allocate_verify_lengths: negative budget ", budget);
  if (draft_length < 0) fail("allocate_verify_lengths: negative draft length ", draft_length);
  struct Candidate {
    double survival;
    int64_t position;
    std::size_t request;
  };
  std::vector<Candidate> candidates;
  for (std::size_t r = 0; r < confidences.size(); ++r) {
    const std::vector<double> a = survivals(confidences[r], draft_length, "allocate_verify_lengths");
    for (std::size_t j = 0; j < a.size(); ++j)
      if (a[j] >= kSurvivalFloor) candidates.push_back({a[j], static_cast<int64_t>(j), r});
  }
  // Larger survival first; on a tie the lower position, then the lower request: an order that
  // does not look at any token's value.
  const auto before = [](const Candidate& x, const Candidate& y) {
    if (x.survival != y.survival) return x.survival > y.survival;
    if (x.position != y.position) return x.position < y.position;
    return x.request < y.request;
  };
  const auto take = static_cast<std::size_t>(std::min<int64_t>(budget, static_cast<int64_t>(candidates.size())));
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(take), candidates.end(), before);
  std::vector<int32_t> lengths(confidences.size(), 1);
  for (std::size_t k = 0; k < take; ++k) ++lengths[candidates[k].request];
  return lengths;
}

}  // namespace deepinfer::engine

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

void check_probes(const std::vector<int64_t>& counts, std::size_t values, const char* what) {
  if (counts.size() != values) fail("step rate table: ", counts.size(), " ", what, " probe counts and ", values, " values");
  for (std::size_t i = 1; i < counts.size(); ++i)
    if (counts[i] <= counts[i - 1]) fail("step rate table: ", what, " probe counts must increase");
}

// The probe that holds at `count`: the last one at or below it, else the first.
std::size_t probe_at(const std::vector<int64_t>& counts, int64_t count) {
  const auto after = std::upper_bound(counts.begin(), counts.end(), count);
  return after == counts.begin() ? 0 : static_cast<std::size_t>(after - counts.begin()) - 1;
}

}  // namespace

StepRateTable::StepRateTable(std::vector<int64_t> tokens, std::vector<double> steps_per_second,
                             std::vector<int64_t> draft_sequences, std::vector<double> draft_seconds)
    : tokens_(std::move(tokens)),
      rates_(std::move(steps_per_second)),
      draft_sequences_(std::move(draft_sequences)),
      draft_seconds_(std::move(draft_seconds)) {
  check_probes(tokens_, rates_.size(), "token");
  check_probes(draft_sequences_, draft_seconds_.size(), "draft");
  for (const double rate : rates_)
    if (!(rate > 0.0) || !std::isfinite(rate)) fail("step rate table: rate ", rate, " is not positive");
  for (const double seconds : draft_seconds_)
    if (!(seconds >= 0.0) || !std::isfinite(seconds)) fail("step rate table: draft time ", seconds, " is not >= 0");
}

double StepRateTable::steps_per_second(int64_t tokens) const {
  return tokens_.empty() ? 1.0 : rates_[probe_at(tokens_, tokens)];
}

double StepRateTable::draft_seconds(int64_t sequences) const {
  return draft_sequences_.empty() ? 0.0 : draft_seconds_[probe_at(draft_sequences_, sequences)];
}

double StepRateTable::speculative_steps_per_second(int64_t tokens, int64_t sequences) const {
  return 1.0 / (1.0 / steps_per_second(tokens) + draft_seconds(sequences));
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
  double best_throughput = expected * table.speculative_steps_per_second(requests, requests);
  for (int64_t n = 1; n <= n_max; ++n) {
    expected += candidates[static_cast<std::size_t>(n - 1)];
    const double throughput = expected * table.speculative_steps_per_second(requests + n, requests);
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

#include "engine/confidence_calibration.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "core/error.h"

namespace deepinfer::engine {
namespace {

constexpr int kGridSize = 41;  // log-spaced over [0.1, 10], as the paper's and SGLang's fit
constexpr int kBins = 15;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double mean(std::span<const double> values) {
  return values.empty() ? 0.0 : std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

}  // namespace

double expected_calibration_error(std::span<const double> predicted, std::span<const uint8_t> outcome, int bins) {
  if (predicted.size() != outcome.size()) fail("expected_calibration_error: ", predicted.size(), " predictions for ", outcome.size(), " outcomes");
  if (bins < 1) fail("expected_calibration_error: ", bins, " bins");
  if (predicted.empty()) return 0.0;
  std::vector<double> sum_predicted(static_cast<std::size_t>(bins)), sum_outcome(static_cast<std::size_t>(bins));
  std::vector<int64_t> count(static_cast<std::size_t>(bins));
  for (std::size_t i = 0; i < predicted.size(); ++i) {
    const double p = std::clamp(predicted[i], 0.0, 1.0);
    const auto bin = static_cast<std::size_t>(std::min(static_cast<int>(p * bins), bins - 1));
    sum_predicted[bin] += p;
    sum_outcome[bin] += outcome[i] ? 1.0 : 0.0;
    ++count[bin];
  }
  double error = 0;
  for (std::size_t b = 0; b < count.size(); ++b)
    if (count[b] > 0) error += std::abs(sum_predicted[b] - sum_outcome[b]);  // = n_b |mean_p - mean_o|
  return error / static_cast<double>(predicted.size());
}

double roc_auc(std::span<const double> score, std::span<const uint8_t> outcome) {
  if (score.size() != outcome.size()) fail("roc_auc: ", score.size(), " scores for ", outcome.size(), " outcomes");
  std::vector<std::size_t> order(score.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return score[a] < score[b]; });
  // Mann-Whitney: the positives' rank sum, tied scores sharing their mean rank.
  double positive_rank_sum = 0;
  int64_t positives = 0;
  for (std::size_t first = 0; first < order.size();) {
    std::size_t last = first;
    while (last + 1 < order.size() && score[order[last + 1]] == score[order[first]]) ++last;
    const double rank = 0.5 * static_cast<double>(first + last) + 1.0;
    for (std::size_t i = first; i <= last; ++i)
      if (outcome[order[i]]) {
        positive_rank_sum += rank;
        ++positives;
      }
    first = last + 1;
  }
  const auto negatives = static_cast<int64_t>(score.size()) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  const auto p = static_cast<double>(positives), n = static_cast<double>(negatives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * n);
}

ConfidenceCalibration fit_confidence_temperatures(std::span<const ConfidenceRound> rounds, int64_t block_size) {
  if (block_size < 1) fail("confidence calibration: block size ", block_size);
  if (rounds.empty()) fail("confidence calibration: no rounds to fit (record some with --confidence-log under --speculative static)");
  for (std::size_t n = 0; n < rounds.size(); ++n) {
    const ConfidenceRound& round = rounds[n];
    if (std::cmp_not_equal(round.raw.size(), block_size))
      fail("confidence calibration: round ", n, " has ", round.raw.size(), " confidences for a block of ", block_size);
    if (round.accepted < 0 || round.accepted > block_size)
      fail("confidence calibration: round ", n, " kept ", round.accepted, " drafts of ", block_size);
    for (const float raw : round.raw)
      if (!std::isfinite(raw)) fail("confidence calibration: round ", n, " has a raw confidence of ", raw);
  }
  std::vector<double> grid(kGridSize);
  for (int i = 0; i < kGridSize; ++i) grid[static_cast<std::size_t>(i)] = std::pow(10.0, -1.0 + 2.0 * i / (kGridSize - 1));

  const std::size_t count = rounds.size();
  std::vector<double> survival_before(count, 1.0), survival_after(count, 1.0), candidate(count);
  std::vector<uint8_t> kept(count);
  ConfidenceCalibration out;
  for (int64_t k = 0; k < block_size; ++k) {
    const auto position = static_cast<std::size_t>(k);
    for (std::size_t n = 0; n < count; ++n) {
      kept[n] = rounds[n].accepted > k ? 1 : 0;
      survival_before[n] *= sigmoid(rounds[n].raw[position]);
    }
    double best_error = 0, best_temperature = 1;
    std::vector<double> best;
    for (const double temperature : grid) {
      for (std::size_t n = 0; n < count; ++n)
        candidate[n] = survival_after[n] * sigmoid(rounds[n].raw[position] / temperature);
      const double error = expected_calibration_error(candidate, kept, kBins);
      if (best.empty() || error < best_error) {  // the first minimum, from the coldest
        best_error = error;
        best_temperature = temperature;
        best = candidate;
      }
    }
    survival_after = std::move(best);
    PositionCalibration position_out;
    position_out.rounds = static_cast<int64_t>(count);
    position_out.observed_survival =
        static_cast<double>(std::count(kept.begin(), kept.end(), uint8_t{1})) / static_cast<double>(count);
    position_out.predicted_before = mean(survival_before);
    position_out.predicted_after = mean(survival_after);
    position_out.error_before = expected_calibration_error(survival_before, kept, kBins);
    position_out.error_after = best_error;
    position_out.auc = roc_auc(survival_after, kept);
    position_out.temperature = best_temperature;
    out.temperatures.push_back(best_temperature);
    out.positions.push_back(position_out);
  }
  return out;
}

}  // namespace deepinfer::engine

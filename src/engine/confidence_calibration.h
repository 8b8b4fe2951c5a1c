#pragma once
// Post-hoc calibration of the DSpark confidence head: sequential temperature scaling (STS,
// ../shared/docs/dspark.md §2). The head's c_k = sigmoid(raw_k / T_k) estimates the chance that
// draft k survives given drafts 1..k-1 did; confidence-scheduled verification ranks and prices
// drafts by the products S_k = c_1 ... c_k, so S_k must match how often the first k drafts are
// all kept. The fit reads rounds recorded from live verification of whole blocks (ConfidenceLog)
// and, left to right, picks each T_k from 41 log-spaced values in [0.1, 10] that minimise the
// expected calibration error (15 equal-width bins) of S_{k-1} sigmoid(raw_k / T_k) against the
// observed "first k drafts kept", with S_{k-1} already fitted. The temperatures go into the
// model's config.json as dspark_confidence_temperatures (docs/MODELS.md).
#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer::engine {

// One verification of a whole draft block: the head's raw outputs (before any temperature) and
// how many drafts the target kept, from the first.
struct ConfidenceRound {
  std::vector<float> raw;  // [block size]
  int32_t accepted = 0;    // 0 .. block size
};

struct PositionCalibration {
  int64_t rounds = 0;             // rounds that reached this position's question (all of them)
  double observed_survival = 0;   // share of rounds that kept drafts 1..k
  double predicted_before = 0;    // mean S_k with the head's raw confidences (all T = 1)
  double predicted_after = 0;     // mean S_k with the fitted temperatures
  double error_before = 0;        // expected calibration error of S_k, all T = 1
  double error_after = 0;         // the same with the fitted temperatures
  double auc = 0;                 // how well the fitted S_k ranks kept over not kept (0.5: not at all)
  double temperature = 1;         // T_k
};

struct ConfidenceCalibration {
  std::vector<double> temperatures;             // [block size]
  std::vector<PositionCalibration> positions;   // [block size]
};

// Throws deepinfer::Error when `rounds` is empty or a round's size is not `block_size` or its
// accepted count is outside [0, block_size], or a raw value is not finite.
ConfidenceCalibration fit_confidence_temperatures(std::span<const ConfidenceRound> rounds, int64_t block_size);

// Expected calibration error: predictions in [0, 1] grouped into `bins` equal-width bins (1.0 in
// the last), the mean |mean prediction - observed rate| weighted by each bin's share.
double expected_calibration_error(std::span<const double> predicted, std::span<const uint8_t> outcome, int bins = 15);
// The area under the ROC curve of `score` for outcome 1 against 0 (ties count half); 0.5 when
// either class is empty.
double roc_auc(std::span<const double> score, std::span<const uint8_t> outcome);

}  // namespace deepinfer::engine

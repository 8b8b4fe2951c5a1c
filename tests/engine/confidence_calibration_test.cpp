// Sequential temperature scaling of the DSpark confidence head (engine/confidence_calibration.h)
// and its log (engine/confidence_log.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/confidence_calibration.h"
#include "engine/confidence_log.h"

namespace deepinfer::engine {
namespace {

TEST(ConfidenceCalibration, CalibrationErrorOfKnownBins) {
  // All predictions 0.8 in one bin, half of them kept: |0.8 - 0.5| = 0.3.
  const std::vector<double> predicted(10, 0.8);
  const std::vector<uint8_t> outcome = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
  EXPECT_NEAR(expected_calibration_error(predicted, outcome), 0.3, 1e-12);
  // Two bins, each exact: 0.
  EXPECT_NEAR(expected_calibration_error(std::vector<double>{0.0, 0.0, 1.0, 1.0}, std::vector<uint8_t>{0, 0, 1, 1}), 0.0,
              1e-12);
  // 1.0 falls in the last bin, not past it.
  EXPECT_NEAR(expected_calibration_error(std::vector<double>{1.0}, std::vector<uint8_t>{0}), 1.0, 1e-12);
  EXPECT_THROW(expected_calibration_error(std::vector<double>{0.5}, std::vector<uint8_t>{}), Error);
}

TEST(ConfidenceCalibration, RankingAuc) {
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<double>{0.1, 0.2, 0.8, 0.9}, std::vector<uint8_t>{0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<double>{0.1, 0.2, 0.8, 0.9}, std::vector<uint8_t>{1, 1, 0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<double>{0.5, 0.5, 0.5, 0.5}, std::vector<uint8_t>{1, 0, 1, 0}), 0.5);
  // One positive above one of two negatives: 1 of 2 pairs.
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<double>{0.1, 0.5, 0.9}, std::vector<uint8_t>{0, 1, 0}), 0.5);
  EXPECT_DOUBLE_EQ(roc_auc(std::vector<double>{0.1, 0.9}, std::vector<uint8_t>{1, 1}), 0.5);
}

// Rounds from a head whose true conditional survival at position k is sigmoid(raw_k / T_k): the
// fit finds each T_k within a grid step or two and leaves the cumulative survival calibrated.
TEST(ConfidenceCalibration, RecoversTheTemperaturesOfAKnownHead) {
  const std::vector<double> truth = {0.5, 2.0, 1.0, 3.0};
  const std::vector<double> centre = {2.0, 1.0, 0.0, -0.5};
  std::mt19937_64 rng(7);
  std::normal_distribution<double> spread(0.0, 2.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<ConfidenceRound> rounds(40000);
  for (ConfidenceRound& round : rounds) {
    bool alive = true;
    for (std::size_t k = 0; k < truth.size(); ++k) {
      const double raw = centre[k] + spread(rng);
      round.raw.push_back(static_cast<float>(raw));
      if (alive && uniform(rng) < 1.0 / (1.0 + std::exp(-raw / truth[k]))) ++round.accepted;
      else alive = false;
    }
  }
  const ConfidenceCalibration fit = fit_confidence_temperatures(rounds, 4);
  ASSERT_EQ(fit.temperatures.size(), 4u);
  ASSERT_EQ(fit.positions.size(), 4u);
  for (std::size_t k = 0; k < truth.size(); ++k) {
    EXPECT_GT(fit.temperatures[k], truth[k] / 1.3) << "position " << k;
    EXPECT_LT(fit.temperatures[k], truth[k] * 1.3) << "position " << k;
    const PositionCalibration& p = fit.positions[k];
    EXPECT_EQ(p.rounds, 40000);
    EXPECT_LT(p.error_after, 0.02) << "position " << k;
    EXPECT_NEAR(p.predicted_after, p.observed_survival, 0.02) << "position " << k;
    EXPECT_GT(p.auc, 0.6) << "position " << k;
  }
  // Position 0's head is too sharp (T = 0.5 read as 1) and position 1's too flat: both are
  // measurably off before the fit.
  EXPECT_GT(fit.positions[0].error_before, 2 * fit.positions[0].error_after);
  EXPECT_GT(fit.positions[1].error_before, 2 * fit.positions[1].error_after);
}

TEST(ConfidenceCalibration, RefusesInconsistentRounds) {
  EXPECT_THROW(fit_confidence_temperatures({}, 3), Error);
  std::vector<ConfidenceRound> rounds = {{{0.1f, 0.2f, 0.3f}, 1}};
  EXPECT_NO_THROW(fit_confidence_temperatures(rounds, 3));
  EXPECT_THROW(fit_confidence_temperatures(rounds, 4), Error);  // sizes differ
  rounds[0].accepted = 4;
  EXPECT_THROW(fit_confidence_temperatures(rounds, 3), Error);
  rounds[0].accepted = 1;
  rounds[0].raw[1] = NAN;
  EXPECT_THROW(fit_confidence_temperatures(rounds, 3), Error);
}

TEST(ConfidenceLog, RoundTripsAndNamesTheBadLine) {
  const std::string path = ::testing::TempDir() + "confidence_log_test.jsonl";
  std::remove(path.c_str());
  {
    ConfidenceLog log(path);
    log.write({{1.5f, -0.25f}, 2});
    log.write({{0.0f, 3.0f}, 0});
  }
  std::vector<ConfidenceRound> rounds = read_confidence_log(path);
  ASSERT_EQ(rounds.size(), 2u);
  EXPECT_EQ(rounds[0].raw, (std::vector<float>{1.5f, -0.25f}));
  EXPECT_EQ(rounds[0].accepted, 2);
  EXPECT_EQ(rounds[1].accepted, 0);
  {
    std::ofstream out(path, std::ios::app);
    out << "{\"raw\": [1.0, 2.0], \"accepted\": 3}\n";
  }
  try {
    read_confidence_log(path);
    ADD_FAILURE() << "a kept count past the block was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(":3:"), std::string::npos) << e.what();
  }
  for (const char* bad : {"[1, 2]", "{\"raw\": [], \"accepted\": 0}", "{\"raw\": [\"x\"], \"accepted\": 0}",
                          "{\"raw\": [1.0]}", "not json"}) {
    {
      std::ofstream out(path, std::ios::trunc);
      out << bad << '\n';
    }
    EXPECT_THROW(read_confidence_log(path), Error) << bad;
  }
  std::remove(path.c_str());
  EXPECT_THROW(read_confidence_log(path), Error);
}

}  // namespace
}  // namespace deepinfer::engine

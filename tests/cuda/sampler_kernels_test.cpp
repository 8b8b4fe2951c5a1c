// cuda::sample_rows against engine::sample, row by row: the same token, the same error, and the
// same log-probabilities bit for bit, over random logits (NaN, -inf, ties, signed zeros, peaked
// and flat rows), every truncation (top_k 1 / 2 / 50 / vocab - 1 / vocab, top_p, min_p), greedy
// and tiny to large temperatures, penalties with histories, logit_bias, logprobs none / 0 / 5 / 20,
// and varied seeds, request ids and positions; vocabularies of 1, 7, 1000 and 129280.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/cuda_test_support.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/token_history.h"
#include "kernels/cuda/sampler_kernels.h"

namespace deepinfer::kernels::cuda {
namespace {

using cuda_testing::DeviceBytes;
using cuda_testing::from_device;
using cuda_testing::synchronize;
using cuda_testing::to_device;

constexpr Stream kDefaultStream = nullptr;
constexpr float kInfinity = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Row {
  std::vector<float> logits;
  engine::SamplingParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;  // appended in this order
  uint64_t seed = 0;
  uint64_t request_id = 0;
  int64_t position = 0;
  // A structured-output mask over (vocab + 63) / 64 words (empty: none) and its fallback token.
  std::vector<uint64_t> mask;
  int32_t fallback = -1;
};

struct Outcome {
  int32_t token = -1;
  int32_t error = kSampleOk;
  float logprob = kNaN;
  std::vector<engine::TokenLogprob> top;
  std::string message;  // the CPU's error
};

engine::TokenHistory history_of(const Row& row) {
  engine::TokenHistory history(row.prompt);
  for (int32_t token : row.generated) history.append(token);
  return history;
}

// With a mask, what the engine's host path does (engine/step_executor.cpp sample_for): forbidden
// logits become -inf before sample(), and no allowed non-NaN logit gives the fallback token.
Outcome cpu_sample(const Row& row) {
  Outcome out;
  std::vector<float> logits = row.logits;
  if (!row.mask.empty()) {
    bool any = false;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      if (((row.mask[i / 64] >> (i % 64)) & 1) == 0) logits[i] = -kInfinity;
      else any = any || logits[i] == logits[i];
    }
    if (!any) {
      out.token = row.fallback;
      out.logprob = 0.0f;
      return out;
    }
  }
  try {
    const engine::SampleResult result =
        engine::sample(logits, row.params, history_of(row), row.seed, row.request_id, row.position);
    out.token = result.token;
    out.logprob = result.logprob;
    out.top = result.top_logprobs;
  } catch (const Error& error) {
    out.message = error.what();
    if (out.message.find("position") != std::string::npos)
      out.error = kSamplePositionOutOfRange;
    else if (out.message.find("largest logit") != std::string::npos)
      out.error = kSampleNoFiniteMaximum;
    else if (out.message.find("outside the vocabulary") != std::string::npos ||
             out.message.find("token history holds id") != std::string::npos)
      out.error = kSampleIdOutsideVocabulary;
    else
      out.error = -1;  // a reason the device does not know
  }
  return out;
}

// All rows share one vocabulary.
std::vector<Outcome> gpu_sample(const std::vector<Row>& rows, int64_t vocab) {
  std::vector<float> logits;
  std::vector<SampleRowParams> params;
  std::vector<int32_t> prompt_tokens;
  std::vector<GeneratedCount> generated;
  std::vector<LogitBias> bias;
  std::vector<uint64_t> masks;
  logits.reserve(rows.size() * static_cast<std::size_t>(vocab));
  for (const Row& row : rows) {
    EXPECT_EQ(static_cast<int64_t>(row.logits.size()), vocab);
    logits.insert(logits.end(), row.logits.begin(), row.logits.end());
    const engine::TokenHistory history = history_of(row);
    SampleRowParams p;
    p.temperature = row.params.temperature;
    p.top_p = row.params.top_p;
    p.min_p = row.params.min_p;
    p.top_k = row.params.top_k;
    p.presence_penalty = row.params.presence_penalty;
    p.frequency_penalty = row.params.frequency_penalty;
    p.repetition_penalty = row.params.repetition_penalty;
    p.seed = row.seed;
    p.request_id = row.request_id;
    p.position = row.position;
    p.logprobs = row.params.logprobs ? *row.params.logprobs : -1;
    p.prompt_begin = static_cast<int32_t>(prompt_tokens.size());
    for (int32_t token : history.prompt_tokens_distinct()) prompt_tokens.push_back(token);
    p.prompt_end = static_cast<int32_t>(prompt_tokens.size());
    p.generated_begin = static_cast<int32_t>(generated.size());
    for (const engine::GeneratedTokenCount& seen : history.generated_counts())
      generated.push_back({seen.token, seen.count, seen.in_prompt ? 1 : 0});
    p.generated_end = static_cast<int32_t>(generated.size());
    p.bias_begin = static_cast<int32_t>(bias.size());
    for (const auto& [token, value] : row.params.logit_bias) bias.push_back({token, value});
    p.bias_end = static_cast<int32_t>(bias.size());
    if (!row.mask.empty()) {
      EXPECT_EQ(static_cast<int64_t>(row.mask.size()), (vocab + 63) / 64);
      p.mask_row = static_cast<int32_t>(masks.size() / row.mask.size());
      p.mask_fallback_token = row.fallback;
      masks.insert(masks.end(), row.mask.begin(), row.mask.end());
    }
    params.push_back(p);
  }
  const auto rows_count = static_cast<int64_t>(rows.size());
  const DeviceBytes logits_d = to_device(logits);
  const DeviceBytes params_d = to_device(params);
  const DeviceBytes prompt_d = to_device(prompt_tokens);
  const DeviceBytes generated_d = to_device(generated);
  const DeviceBytes bias_d = to_device(bias);
  const DeviceBytes masks_d = to_device(masks);
  const std::size_t scratch_bytes = sample_scratch_bytes(rows_count, vocab);
  const DeviceBytes scratch(scratch_bytes);
  const DeviceBytes results_d(rows.size() * sizeof(SampleRowResult));
  sample_rows(logits_d.at<float>(), rows_count, vocab, params_d.at<SampleRowParams>(), prompt_d.at<int32_t>(),
              generated_d.at<GeneratedCount>(), bias_d.at<LogitBias>(), masks.empty() ? nullptr : masks_d.at<uint64_t>(),
              scratch.get(), scratch_bytes,
              results_d.at<SampleRowResult>(), kDefaultStream);
  synchronize();
  const std::vector<SampleRowResult> results = from_device(results_d.at<SampleRowResult>(), rows.size());
  std::vector<Outcome> outcomes;
  for (const SampleRowResult& result : results) {
    Outcome out;
    out.token = result.token;
    out.error = result.error;
    out.logprob = result.logprob;
    for (int32_t a = 0; a < result.top_count && a < kSampleMaxLogprobs; ++a)
      out.top.push_back({result.top_tokens[a], result.top_logprobs[a]});
    if (result.top_count < 0 || result.top_count > kSampleMaxLogprobs) out.top.push_back({-7, kNaN});
    outcomes.push_back(out);
  }
  return outcomes;
}

std::string describe(const Row& row) {
  const engine::SamplingParams& p = row.params;
  return str_cat("T=", p.temperature, " top_k=", p.top_k, " top_p=", p.top_p, " min_p=", p.min_p,
                 " rep=", p.repetition_penalty, " freq=", p.frequency_penalty, " pres=", p.presence_penalty,
                 " bias=", p.logit_bias.size(), " logprobs=", p.logprobs ? *p.logprobs : -1, " prompt=",
                 row.prompt.size(), " generated=", row.generated.size(), " seed=", row.seed, " request=",
                 row.request_id, " position=", row.position);
}

std::string describe(const Outcome& out) {
  std::string text = str_cat("token ", out.token, " error ", out.error, " logprob ", out.logprob, " (0x",
                             std::bit_cast<uint32_t>(out.logprob), ") top");
  for (const engine::TokenLogprob& alternative : out.top)
    text += str_cat(" ", alternative.token, ":", alternative.logprob);
  if (!out.message.empty()) text += " [" + out.message + "]";
  return text;
}

bool same(const Outcome& gpu, const Outcome& cpu) {
  if (gpu.token != cpu.token || gpu.error != cpu.error) return false;
  if (cpu.error != kSampleOk) return true;
  if (std::bit_cast<uint32_t>(gpu.logprob) != std::bit_cast<uint32_t>(cpu.logprob)) return false;
  if (gpu.top.size() != cpu.top.size()) return false;
  for (std::size_t a = 0; a < cpu.top.size(); ++a)
    if (gpu.top[a].token != cpu.top[a].token ||
        std::bit_cast<uint32_t>(gpu.top[a].logprob) != std::bit_cast<uint32_t>(cpu.top[a].logprob))
      return false;
  return true;
}

// Samples the rows on both sides; every row must agree.
void expect_same_as_cpu(const std::vector<Row>& rows, int64_t vocab) {
  const std::vector<Outcome> gpu = gpu_sample(rows, vocab);
  ASSERT_EQ(gpu.size(), rows.size());
  int mismatches = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Outcome cpu = cpu_sample(rows[r]);
    if (same(gpu[r], cpu)) continue;
    if (++mismatches <= 8)
      ADD_FAILURE() << "vocab " << vocab << " row " << r << " (" << describe(rows[r]) << ")\n  gpu: "
                    << describe(gpu[r]) << "\n  cpu: " << describe(cpu);
  }
  EXPECT_EQ(mismatches, 0) << "of " << rows.size() << " rows";
}

template <typename T>
T pick(const std::vector<T>& choices, std::mt19937_64& rng) {
  return choices[std::uniform_int_distribution<std::size_t>(0, choices.size() - 1)(rng)];
}

std::vector<float> random_logits(int64_t vocab, std::mt19937_64& rng) {
  const auto n = static_cast<std::size_t>(vocab);
  std::vector<float> logits(n);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
  const float spread = pick<float>({0.5f, 1.0f, 3.0f, 8.0f}, rng);
  std::normal_distribution<float> normal(0.0f, spread);
  for (float& logit : logits) logit = normal(rng);
  switch (kind) {
    case 0:  // ties: a few distinct values
      for (float& logit : logits) logit = std::round(logit * 2.0f) / 2.0f;
      break;
    case 1:  // NaN and -inf sprinkled, a +-0 here and there
      for (float& logit : logits) {
        const double u = unit(rng);
        logit = u < 0.05 ? kNaN : u < 0.1 ? -kInfinity : u < 0.12 ? 0.0f : u < 0.14 ? -0.0f : logit;
      }
      break;
    case 2:  // peaked: one token far ahead
      logits[std::uniform_int_distribution<std::size_t>(0, n - 1)(rng)] = 40.0f;
      break;
    case 3:  // flat: every weight within a few ulps of 1 after exp
      for (float& logit : logits) logit = 1.0f + logit * 1e-6f;
      break;
    case 4:  // all equal
      for (float& logit : logits) logit = 2.5f;
      break;
    case 5:  // large logits, two tied maxima
      for (float& logit : logits) logit = logit * 100.0f + 1000.0f;
      if (n > 1) logits[n - 1] = logits[0] = 3000.0f;
      break;
    case 6:  // mostly -inf, few finite
      for (float& logit : logits)
        if (unit(rng) < 0.9) logit = -kInfinity;
      logits[std::uniform_int_distribution<std::size_t>(0, n - 1)(rng)] = 1.0f;
      break;
    case 7:  // signed zeros and negatives only
      for (float& logit : logits) logit = unit(rng) < 0.5 ? (unit(rng) < 0.5 ? -0.0f : 0.0f) : -std::fabs(logit);
      break;
    default:
      break;
  }
  return logits;
}

Row random_row(int64_t vocab, std::mt19937_64& rng) {
  Row row;
  row.logits = random_logits(vocab, rng);
  engine::SamplingParams& p = row.params;
  p.temperature = pick<float>({0.0f, 1e-3f, 0.7f, 1.0f, 1.0f, 3.0f}, rng);
  const auto k = static_cast<int32_t>(vocab);
  p.top_k = pick<int32_t>({0, 0, -1, 1, 2, 50, k, k - 1 > 0 ? k - 1 : 1}, rng);
  p.top_p = pick<float>({1.0f, 1.0f, 0.1f, 0.5f, 0.9f, 0.95f}, rng);
  p.min_p = pick<float>({0.0f, 0.0f, 0.05f, 0.3f}, rng);
  std::uniform_int_distribution<int32_t> any_token(0, k - 1);
  if (std::uniform_int_distribution<int>(0, 2)(rng) > 0) {
    const int prompt = std::uniform_int_distribution<int>(0, 64)(rng);
    for (int i = 0; i < prompt; ++i) row.prompt.push_back(any_token(rng));
    const int generated = std::uniform_int_distribution<int>(0, 64)(rng);
    for (int i = 0; i < generated; ++i)
      row.generated.push_back(!row.prompt.empty() && i % 3 == 0 ? row.prompt[static_cast<std::size_t>(i) % row.prompt.size()]
                                                                : any_token(rng));
    p.repetition_penalty = pick<float>({1.0f, 1.3f, 0.8f, 2.0f}, rng);
    p.frequency_penalty = pick<float>({0.0f, 0.5f, -1.5f, 2.0f, 0.37f, -1.13f}, rng);  // inexact products too
    p.presence_penalty = pick<float>({0.0f, 0.3f, -0.7f, 1.9f}, rng);
  }
  const int biased = std::uniform_int_distribution<int>(0, 4)(rng) - 1;
  for (int i = 0; i < biased; ++i) p.logit_bias[any_token(rng)] = pick<float>({-100.0f, -5.5f, 0.25f, 3.0f, 100.0f}, rng);
  const int logprobs = pick<int>({-1, -1, 0, 1, 5, 20}, rng);
  if (logprobs >= 0) p.logprobs = logprobs;
  row.seed = rng();
  row.request_id = pick<uint64_t>({0, 1, 3, rng()}, rng);
  row.position = pick<int64_t>({0, 1, 17, int64_t{0xFFFFFFFF}, static_cast<int64_t>(rng() % 100000)}, rng);
  return row;
}

std::vector<Row> random_rows(int64_t vocab, int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Row> rows;
  for (int i = 0; i < count; ++i) rows.push_back(random_row(vocab, rng));
  return rows;
}

TEST(CudaSampler, MatchesCpuOnTinyVocabularies) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  for (int64_t vocab : {1, 2, 7, 8, 9})
    expect_same_as_cpu(random_rows(vocab, 1500, 100 + static_cast<uint64_t>(vocab)), vocab);
}

TEST(CudaSampler, MatchesCpuOnVocabulary1000) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  expect_same_as_cpu(random_rows(1000, 3000, 7), 1000);
  expect_same_as_cpu(random_rows(1001, 1000, 8), 1001);
}

TEST(CudaSampler, MatchesCpuOnVocabulary129280) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  expect_same_as_cpu(random_rows(129280, 240, 11), 129280);
}

// Every truncation path on the full vocabulary, with a nucleus of many tokens (flat rows) and
// top_k = vocab - 1 (the largest top-k set) combined with top_p.
TEST(CudaSampler, MatchesCpuOnLargeNucleiAndTopKSets) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  constexpr int64_t kVocab = 129280;
  std::mt19937_64 rng(23);
  std::vector<Row> rows;
  for (float spread : {0.05f, 1.0f, 4.0f})
    for (int32_t top_k : {0, 2, 50, 4096, int32_t{kVocab - 1}})
      for (float top_p : {1.0f, 0.1f, 0.9f, 0.999f})
        for (float min_p : {0.0f, 0.05f}) {
          Row row;
          std::normal_distribution<float> normal(0.0f, spread);
          row.logits.resize(kVocab);
          for (float& logit : row.logits) logit = normal(rng);
          row.params.temperature = pick<float>({0.7f, 1.0f, 3.0f}, rng);
          row.params.top_k = top_k;
          row.params.top_p = top_p;
          row.params.min_p = min_p;
          row.params.logprobs = 3;
          row.seed = rng();
          row.request_id = rng() % 4;
          row.position = static_cast<int64_t>(rng() % 5000);
          rows.push_back(std::move(row));
        }
  expect_same_as_cpu(rows, kVocab);
}

// The penalised and biased logit bit for bit: a greedy row whose only finite logits are the
// penalised token's and a rival's at exactly the CPU's processed value, the rival just below it in
// id order (the rival wins the tie) or just above (it loses): one ulp either way changes the token.
TEST(CudaSampler, PenaltiesAndBiasMatchBitForBit) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  constexpr int64_t kVocab = 64;
  std::mt19937_64 rng(31);
  std::normal_distribution<float> normal(0.0f, 6.0f);
  std::vector<Row> rows;
  while (rows.size() < 3000) {
    Row base;
    base.logits.assign(kVocab, -kInfinity);
    const auto target = static_cast<int32_t>(1 + rng() % (kVocab - 2));
    base.logits[static_cast<std::size_t>(target)] = normal(rng);
    engine::SamplingParams& p = base.params;
    p.temperature = 0.0f;
    p.logprobs = 1;
    p.repetition_penalty = pick<float>({1.0f, 1.3f, 0.77f, 2.9f}, rng);
    p.frequency_penalty = pick<float>({0.0f, 0.37f, -1.13f, 1.7f}, rng);
    p.presence_penalty = pick<float>({0.0f, 0.3f, -0.7f, 1.9f}, rng);
    if (rng() % 2) p.logit_bias[target] = pick<float>({0.25f, -3.3f, 7.1f}, rng);
    if (rng() % 2) base.prompt = {target, target};
    const auto count = static_cast<int>(rng() % 10);
    for (int c = 0; c < count; ++c) base.generated.push_back(target);
    base.seed = rng();
    std::vector<float> processed = base.logits;
    engine::apply_penalties_and_bias(processed, p, history_of(base));
    const float value = processed[static_cast<std::size_t>(target)];
    if (!std::isfinite(value)) continue;
    for (int32_t rival : {target - 1, target + 1}) {
      Row row = base;
      row.logits[static_cast<std::size_t>(rival)] = value;
      rows.push_back(std::move(row));
    }
  }
  expect_same_as_cpu(rows, kVocab);
}

// One seed over many positions and request ids: the Philox stream and the draw.
TEST(CudaSampler, MatchesCpuOverPositionsAndStreams) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  constexpr int64_t kVocab = 1000;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  for (float& logit : logits) logit = normal(rng);
  std::vector<Row> rows;
  for (uint64_t request = 0; request < 4; ++request)
    for (int64_t position = 0; position < 500; ++position) {
      Row row;
      row.logits = logits;
      row.params.logprobs = 20;
      row.seed = 0x0123456789ABCDEFull;
      row.request_id = request;
      row.position = position * 7919;
      rows.push_back(std::move(row));
    }
  expect_same_as_cpu(rows, kVocab);
}

// Where the CPU throws, the device reports the same reason.
TEST(CudaSampler, ReportsTheCpuErrors) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  for (int64_t vocab : {7, 1000, 129280}) {
    const auto n = static_cast<std::size_t>(vocab);
    std::vector<Row> rows;
    const auto add = [&](std::vector<float> logits, auto&& edit) {
      Row row;
      row.logits = std::move(logits);
      row.params.logprobs = 5;
      row.seed = 42;
      row.position = 3;
      edit(row);
      rows.push_back(std::move(row));
    };
    const auto nothing = [](Row&) {};
    const std::vector<float> minus_inf(n, -kInfinity), nan(n, kNaN), zeros(n, 0.0f);
    std::vector<float> plus_inf(n, 1.0f);
    plus_inf[n / 2] = kInfinity;
    add(minus_inf, nothing);
    add(nan, nothing);
    add(minus_inf, [](Row& row) { row.params.temperature = 0.0f; });
    add(minus_inf, [](Row& row) { row.params.logit_bias[0] = 100.0f; });  // -inf + 100 is -inf
    add(plus_inf, nothing);
    add(zeros, [](Row& row) { row.position = -1; });
    add(zeros, [](Row& row) { row.position = int64_t{1} << 32; });
    add(zeros, [](Row& row) {
      row.params.temperature = 0.0f;
      row.position = -5;
    });
    add(zeros, [&](Row& row) { row.prompt = {1, static_cast<int32_t>(vocab)}; });
    add(zeros, [&](Row& row) { row.generated = {0, static_cast<int32_t>(vocab) + 3}; });
    add(zeros, [&](Row& row) { row.params.logit_bias[static_cast<int32_t>(vocab)] = 1.0f; });
    add(zeros, [&](Row& row) { row.params.logit_bias[-1] = 1.0f; });
    add(minus_inf, [&](Row& row) { row.prompt = {static_cast<int32_t>(vocab)}; });  // ids before the maximum
    add(zeros, nothing);                                                          // and a good row between them
    const std::vector<Outcome> gpu = gpu_sample(rows, vocab);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const Outcome cpu = cpu_sample(rows[r]);
      EXPECT_NE(cpu.error, -1) << cpu.message;
      EXPECT_TRUE(same(gpu[r], cpu)) << "vocab " << vocab << " row " << r << "\n  gpu: " << describe(gpu[r])
                                     << "\n  cpu: " << describe(cpu);
    }
    EXPECT_EQ(gpu[0].error, kSampleNoFiniteMaximum);
    EXPECT_EQ(gpu[0].token, -1);
    EXPECT_TRUE(std::isnan(gpu[0].logprob));
    EXPECT_EQ(gpu[5].error, kSamplePositionOutOfRange);
    EXPECT_EQ(gpu[8].error, kSampleIdOutsideVocabulary);
    EXPECT_EQ(gpu[13].error, kSampleOk);
  }
}

// A row's result does not depend on the rows around it.
// Structured-output masks: dense, sparse, a single allowed token, none, allowed tokens whose
// logits are all NaN (the fallback) or all -inf (no finite maximum), beside unmasked rows, with
// every sampling option random_row draws.
TEST(CudaSampler, MasksMatchTheEnginesHostPath) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(1414);
  for (const int64_t vocab : {int64_t{7}, int64_t{1000}, int64_t{129280}}) {
    const auto words = static_cast<std::size_t>((vocab + 63) / 64);
    std::vector<Row> rows;
    for (int r = 0; r < 48; ++r) {
      Row row = random_row(vocab, rng);
      const int kind = r % 8;
      if (kind == 7) {  // unmasked, in the same launch
        rows.push_back(std::move(row));
        continue;
      }
      row.mask.assign(words, 0);
      row.fallback = static_cast<int32_t>(vocab - 1);
      const double density = kind == 0 ? 0.5 : kind == 1 ? 0.01 : 0.0;
      std::uniform_real_distribution<double> unit(0.0, 1.0);
      for (int64_t i = 0; i < vocab; ++i)
        if (unit(rng) < density) row.mask[static_cast<std::size_t>(i / 64)] |= uint64_t{1} << (i % 64);
      const auto any_token = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
      if (kind == 2 || kind == 4 || kind == 5) row.mask[static_cast<std::size_t>(any_token / 64)] |= uint64_t{1} << (any_token % 64);
      if (kind == 4) row.logits[static_cast<std::size_t>(any_token)] = kNaN;         // nothing but NaN: fallback
      if (kind == 5) row.logits[static_cast<std::size_t>(any_token)] = -kInfinity;  // no finite maximum
      if (kind == 6) {  // the bits past the vocabulary are set too: ignored
        row.mask.back() = ~uint64_t{0};
        row.mask.front() |= 1;
      }
      rows.push_back(std::move(row));
    }
    SCOPED_TRACE(vocab);
    expect_same_as_cpu(rows, vocab);
  }
}

TEST(CudaSampler, RowsAreIndependentOfTheBatch) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  constexpr int64_t kVocab = 1000;
  const std::vector<Row> rows = random_rows(kVocab, 64, 99);
  const std::vector<Outcome> batch = gpu_sample(rows, kVocab);
  for (std::size_t r = 0; r < rows.size(); r += 9) {
    const std::vector<Outcome> alone = gpu_sample({rows[r]}, kVocab);
    EXPECT_TRUE(same(alone[0], batch[r])) << "row " << r;
  }
}

TEST(CudaSampler, RejectsBadSizes) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  EXPECT_EQ(sample_scratch_bytes(0, 1000), 0u);
  EXPECT_THROW(sample_rows(nullptr, 1, 0, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, kDefaultStream),
               Error);
  EXPECT_THROW(sample_rows(nullptr, -1, 10, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, kDefaultStream),
               Error);
  const DeviceBytes scratch(64);
  EXPECT_THROW(sample_rows(nullptr, 4, 1000, nullptr, nullptr, nullptr, nullptr, nullptr, scratch.get(), 64, nullptr,
                           kDefaultStream),
               Error);
  sample_rows(nullptr, 0, 1000, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, kDefaultStream);
  synchronize();
}

}  // namespace
}  // namespace deepinfer::kernels::cuda

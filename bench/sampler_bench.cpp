// Cost of sampling one token from a DeepSeek-V4-sized logits row (129,280 ids), per mode.
// Logits are Gaussian with sd 2 (a peaked row, as after a confident LM head) or sd 0.5 (a flat
// row: the nucleus then spans much of the vocabulary, the worst case for top-p).
//
//   cmake --build build --target sampler_bench && build/bench/sampler_bench
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"

namespace {

using deepinfer::engine::SamplingParams;

constexpr size_t kVocab = 129280;

std::vector<float> gaussian_logits(float stddev) {
  std::mt19937 generator(2024);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> logits(kVocab);
  for (float& logit : logits) logit = normal(generator);
  return logits;
}

void run(benchmark::State& state, const SamplingParams& params, float stddev) {
  const std::vector<float> logits = gaussian_logits(stddev);
  std::vector<int32_t> prompt(2000);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919) % kVocab);
  const deepinfer::engine::TokenHistory history(prompt);
  int64_t position = 0;
  for (auto _ : state) {
    auto result = deepinfer::engine::sample(logits, params, history, 42, 0, position++);
    benchmark::DoNotOptimize(result);
  }
}

SamplingParams make(float temperature, int32_t top_k, float top_p, float min_p) {
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  params.top_p = top_p;
  params.min_p = min_p;
  return params;
}

void greedy(benchmark::State& state) { run(state, make(0, 0, 1, 0), 2.0f); }
void greedy_logprobs5(benchmark::State& state) {
  SamplingParams params = make(0, 0, 1, 0);
  params.logprobs = 5;
  run(state, params, 2.0f);
}
void greedy_penalties(benchmark::State& state) {
  SamplingParams params = make(0, 0, 1, 0);
  params.repetition_penalty = 1.1f;
  params.presence_penalty = 0.5f;
  run(state, params, 2.0f);
}
void temperature_only(benchmark::State& state) { run(state, make(0.8f, 0, 1, 0), 2.0f); }
void top_k50(benchmark::State& state) { run(state, make(0.8f, 50, 1, 0), 2.0f); }
void top_p09_peaked(benchmark::State& state) { run(state, make(0.8f, 0, 0.9f, 0), 2.0f); }
void top_p09_flat(benchmark::State& state) { run(state, make(1.0f, 0, 0.9f, 0), 0.5f); }
void top_k50_top_p09(benchmark::State& state) { run(state, make(0.8f, 50, 0.9f, 0), 2.0f); }
void min_p005(benchmark::State& state) { run(state, make(0.8f, 0, 1, 0.05f), 2.0f); }

}  // namespace

BENCHMARK(greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(greedy_logprobs5)->Unit(benchmark::kMicrosecond);
BENCHMARK(greedy_penalties)->Unit(benchmark::kMicrosecond);
BENCHMARK(temperature_only)->Unit(benchmark::kMicrosecond);
BENCHMARK(top_k50)->Unit(benchmark::kMicrosecond);
BENCHMARK(top_p09_peaked)->Unit(benchmark::kMicrosecond);
BENCHMARK(top_p09_flat)->Unit(benchmark::kMicrosecond);
BENCHMARK(top_k50_top_p09)->Unit(benchmark::kMicrosecond);
BENCHMARK(min_p005)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();

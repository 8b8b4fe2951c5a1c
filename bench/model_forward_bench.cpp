// Model::forward on CPU: a 48-token prefill and 32 single-token decode steps (after that prefill),
// on one thread and on two, for the committed golden checkpoints (V4 and V4.1 tiny_fp8, hidden 64)
// and the V4 benchmark model (tests/support/v4_benchmark_model.h: hidden 512, 4 layers, BF16,
// random weights) whose shapes make the timings mean more than per-call overhead.
//
//   build/bench/model_forward_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Thread counts are pools passed through ScopedDefaultThreadPool, so 1 and 2 threads run in one
// process; times are wall clock (the workers' share counts).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"
#include "support/v4_benchmark_model.h"

namespace {

namespace fs = std::filesystem;
using deepinfer::ScopedDefaultThreadPool;
using deepinfer::ThreadPool;
using deepinfer::model::LogitRows;
using deepinfer::model::Model;

constexpr int64_t kPrefillTokens = 48;
constexpr int64_t kDecodeSteps = 32;

class SyntheticDir {
 public:
  SyntheticDir() : path_(fs::temp_directory_path() / ("deepinfer_model_bench_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
    deepinfer::test_support::write_v4_benchmark_model(path_.string());
  }
  ~SyntheticDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

const Model& model_named(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  static std::unique_ptr<SyntheticDir> synthetic;
  auto& slot = models[name];
  if (slot) return *slot;
  const std::string golden = std::string(DEEPINFER_TEST_DATA_DIR) + "/golden/";
  if (name == "v4_tiny_fp8") {
    slot = std::make_unique<Model>(Model::load(golden + "v4/tiny_fp8"));
  } else if (name == "v41_tiny_fp8") {
    slot = std::make_unique<Model>(Model::load(
        golden + "v41/tiny_fp8",
        deepinfer::model::LoadOptions{.tokenizer = std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json"}));
  } else {
    synthetic = std::make_unique<SyntheticDir>();
    slot = std::make_unique<Model>(Model::load(synthetic->str()));
  }
  return *slot;
}

// threads 1 and 2: the default pool settings (workers sleep at once); -2: two threads whose idle
// worker polls kSpinIterations times before sleeping, so it is awake for the next loop.
constexpr int kSpinIterations = 2000;

ThreadPool& pool_of(int threads) {
  static ThreadPool one(1);
  static ThreadPool two(2);
  static ThreadPool two_spinning(2, kSpinIterations);
  return threads == 1 ? one : threads == 2 ? two : two_spinning;
}

std::vector<int32_t> prompt_tokens(int64_t count, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < count; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % (vocab - 8) + 3));
  return ids;
}

void prefill(benchmark::State& state, const std::string& name, int threads) {
  ScopedDefaultThreadPool use(pool_of(threads));
  const Model& model = model_named(name);
  const std::vector<int32_t> tokens = prompt_tokens(kPrefillTokens, model.vocab_size());
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  for (auto _ : state) {
    deepinfer::model::SequenceState sequence = model.new_sequence();
    model.forward(sequence, tokens, logits, LogitRows::Last);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations() * kPrefillTokens),
                                                  benchmark::Counter::kIsRate);
}

void decode(benchmark::State& state, const std::string& name, int threads) {
  ScopedDefaultThreadPool use(pool_of(threads));
  const Model& model = model_named(name);
  const std::vector<int32_t> tokens = prompt_tokens(kPrefillTokens + kDecodeSteps, model.vocab_size());
  const std::span<const int32_t> prompt(tokens.data(), kPrefillTokens);
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  for (auto _ : state) {
    state.PauseTiming();
    deepinfer::model::SequenceState sequence = model.new_sequence();
    model.forward(sequence, prompt, {}, LogitRows::None);
    state.ResumeTiming();
    for (int64_t step = 0; step < kDecodeSteps; ++step) {
      model.forward(sequence, std::span<const int32_t>(tokens.data() + kPrefillTokens + step, 1), logits,
                    LogitRows::Last);
      benchmark::DoNotOptimize(logits.data());
    }
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(state.iterations() * kDecodeSteps),
                                                  benchmark::Counter::kIsRate);
}

const bool registered = [] {
  for (const char* name : {"v4_tiny_fp8", "v41_tiny_fp8", "v4_synthetic_h512"})
    for (int threads : {1, 2, -2}) {
      const std::string suffix =
          std::string(name) + (threads > 0 ? "/threads:" + std::to_string(threads) : std::string("/threads:2_spin"));
      benchmark::RegisterBenchmark(("prefill48/" + suffix).c_str(), prefill, std::string(name), threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("decode32/" + suffix).c_str(), decode, std::string(name), threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();

// CPU linear kernels: GFLOP/s and effective weight GB/s for BF16, FP8 (128x128 tiles) and FP4
// (groups of 32) at decode (1 token) and prefill (64 tokens) shapes, portable vs AVX2, one thread
// vs all; plus a plain streaming-read loop as the memory-bandwidth reference, in the same binary.
//
// Weights rotate through enough copies to exceed 640 MB, more than the last-level cache, so each
// call reads its weights from DRAM as a real model's decode step does; the `cached` shapes keep one
// small copy (256 x 2048, at most 1 MB) in cache, which separates a kernel's own arithmetic rate
// from what the memory system lets it reach.
//
//   build/bench/linear_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/thread_pool.h"
#include "host_read_bandwidth.h"
#include "kernels/cpu/linear_cpu.h"

namespace {

using deepinfer::ThreadPool;
using deepinfer::kernels::ScaleEncoding;
using deepinfer::kernels::WeightEncoding;
using deepinfer::kernels::WeightMatrix;
using deepinfer::kernels::cpu::LinearPath;

constexpr int64_t kColdBytes = int64_t{640} << 20;

int all_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

ThreadPool& pool(int threads) {
  static ThreadPool one(1);
  static ThreadPool all(all_threads());
  return threads == 1 ? one : all;
}

uint64_t next_random(uint64_t& state) {  // xorshift64: fast fill, values irrelevant to speed
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

struct Copies {
  WeightEncoding encoding;
  int64_t rows = 0, cols = 0, block = 0;
  bool cached = false;
  int64_t data_bytes = 0, scale_bytes = 0;
  std::vector<WeightMatrix> matrices;
  std::unique_ptr<uint8_t[]> storage;
};

// Builds (once per configuration; the previous one is freed) copies of one random weight matrix.
// FP8 tiles are block x block (V4: 128, V4.1: 32); FP4 groups are 32.
const Copies& weight_copies(WeightEncoding encoding, int64_t rows, int64_t cols, int64_t block, bool cached) {
  static Copies copies;
  if (copies.storage && copies.encoding == encoding && copies.rows == rows && copies.cols == cols &&
      copies.block == block && copies.cached == cached)
    return copies;
  copies = Copies{};
  copies.encoding = encoding;
  copies.rows = rows;
  copies.cols = cols;
  copies.block = block;
  copies.cached = cached;
  int64_t scale_count = 0;
  switch (encoding) {
    case WeightEncoding::BF16: copies.data_bytes = rows * cols * 2; break;
    case WeightEncoding::FP8_E4M3:
      copies.data_bytes = rows * cols;
      scale_count = ((rows + block - 1) / block) * ((cols + block - 1) / block);
      break;
    case WeightEncoding::FP4_E2M1:
      copies.data_bytes = rows * cols / 2;
      scale_count = rows * cols / 32;
      break;
    case WeightEncoding::F32: copies.data_bytes = rows * cols * 4; break;
  }
  copies.scale_bytes = scale_count;  // E8M0: one byte each
  const int64_t one = (copies.data_bytes + copies.scale_bytes + 64 + 63) / 64 * 64;
  const int64_t count = cached ? 1 : (kColdBytes + one - 1) / one;
  copies.storage.reset(new uint8_t[static_cast<std::size_t>(one * count + 64)]);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int64_t i = 0; i + 8 <= one * count; i += 8) {
    uint64_t value = next_random(state);
    // bf16: sign and mantissa random, magnitudes 2^-15 to 2^-7 like trained weights. Random
    // exponents would make most products subnormal, and those take microcode assists.
    if (encoding == WeightEncoding::BF16) value = (value & 0x83FF83FF83FF83FFull) | 0x3800380038003800ull;
    if (encoding == WeightEncoding::FP8_E4M3) value &= 0xBFBFBFBFBFBFBFBFull;  // never the NaN code
    std::memcpy(copies.storage.get() + i, &value, 8);
  }
  for (int64_t k = 0; k < count; ++k) {
    // 36 bytes into a 64-byte line, like the synthetic V4's LM head: safetensors places a tensor
    // where the one before it ended, rarely on a line.
    uint8_t* lines = copies.storage.get() + k * one;
    uint8_t* base = lines + (64 - reinterpret_cast<uintptr_t>(lines) % 64) % 64 + 36;
    WeightMatrix m;
    m.encoding = encoding;
    m.rows = rows;
    m.cols = cols;
    m.data = base;
    if (scale_count > 0) {
      uint8_t* scales = base + copies.data_bytes;
      for (int64_t s = 0; s < scale_count; ++s) scales[s] = static_cast<uint8_t>(120 + s % 8);
      m.scale_encoding = ScaleEncoding::E8M0;
      m.scales = scales;
      m.block_rows = encoding == WeightEncoding::FP8_E4M3 ? block : 1;
      m.block_cols = encoding == WeightEncoding::FP8_E4M3 ? block : 32;
    }
    copies.matrices.push_back(m);
  }
  return copies;
}

void bench_linear(benchmark::State& state, WeightEncoding encoding, int64_t block, int64_t rows, int64_t cols,
                  int64_t tokens, bool cached, int threads, LinearPath path) {
  const Copies& copies = weight_copies(encoding, rows, cols, block, cached);
  std::vector<float> x(static_cast<std::size_t>(tokens * cols));
  uint64_t seed = 12345;
  for (auto& value : x) value = static_cast<float>(next_random(seed) % 2001) / 1000.0f - 1.0f;
  std::vector<float> y(static_cast<std::size_t>(tokens * rows));
  ThreadPool& workers = pool(threads);
  std::size_t next = 0;
  for (auto _ : state) {
    deepinfer::kernels::cpu::linear(x.data(), tokens, copies.matrices[next], y.data(), workers, path);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    next = (next + 1) % copies.matrices.size();
  }
  const double iterations = static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * static_cast<double>(tokens * rows * cols) * iterations * 1e-9,
                                                benchmark::Counter::kIsRate);
  state.counters["weight_GBs"] = benchmark::Counter(
      static_cast<double>(copies.data_bytes + copies.scale_bytes) * iterations * 1e-9, benchmark::Counter::kIsRate);
  state.counters["threads"] = workers.size();
}

// Streaming read of a 1 GiB buffer, split over the pool like the kernels split rows.
void bench_memory_read(benchmark::State& state, int threads) {
  static const deepinfer::bench::HostReadBuffer buffer(int64_t{1} << 30);
  ThreadPool& workers = pool(threads);
  for (auto _ : state) benchmark::DoNotOptimize(buffer.read_all(workers));
  state.counters["read_GBs"] = benchmark::Counter(static_cast<double>(buffer.bytes()) * static_cast<double>(state.iterations()) * 1e-9,
                                                  benchmark::Counter::kIsRate);
  state.counters["threads"] = workers.size();
}

void register_all() {
  struct Shape { int64_t rows, cols, tokens; bool cached; };
  // 129280 x 256: the LM head of the synthetic V4 that docs/BENCHMARKS.md compares with llama.cpp
  // (rows of 256 columns, 63% of its decode bytes).
  const Shape shapes[] = {{4096, 4096, 1, false}, {2048, 4096, 1, false}, {4096, 4096, 64, false}, {256, 2048, 1, true},
                          {129280, 256, 1, false}};
  struct Encoding { WeightEncoding encoding; int64_t block; const char* name; };
  const Encoding encodings[] = {{WeightEncoding::BF16, 0, "bf16"},
                                {WeightEncoding::FP8_E4M3, 128, "fp8_128x128"},
                                {WeightEncoding::FP8_E4M3, 32, "fp8_32x32"},
                                {WeightEncoding::FP4_E2M1, 32, "fp4_g32"}};
  std::vector<std::pair<LinearPath, const char*>> paths;
  for (auto path : {LinearPath::Portable, LinearPath::Avx2, LinearPath::Avx512})
    if (deepinfer::kernels::cpu::linear_path_available(path))
      paths.push_back({path, deepinfer::kernels::cpu::linear_path_name(path)});
  for (int threads : {1, all_threads()}) {
    benchmark::RegisterBenchmark(("memory_read/1GiB/threads:" + std::to_string(threads)).c_str(), bench_memory_read, threads)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    for (const Encoding& encoding : encodings)
      for (const Shape& shape : shapes)
        for (const auto& [path, path_name] : paths) {
          const std::string name = std::string("linear/") + encoding.name + "/" + std::to_string(shape.rows) + "x" +
                                   std::to_string(shape.cols) + (shape.cached ? "/cached" : "") +
                                   "/tokens:" + std::to_string(shape.tokens) + "/threads:" + std::to_string(threads) + "/" +
                                   path_name;
          benchmark::RegisterBenchmark(name.c_str(), bench_linear, encoding.encoding, encoding.block, shape.rows,
                                       shape.cols, shape.tokens, shape.cached, threads, path)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

#pragma once
// The memory-bandwidth reference of the CPU benchmarks (linear_bench, cpu_pp_tg_bench): a
// streaming read of a buffer larger than any cache, split over a thread pool the way the kernels
// split rows, so a memory-bound kernel's bytes per second can be set against it in the same run.
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <cstdint>
#include <memory>
#include <vector>

#include "core/thread_pool.h"

namespace deepinfer::bench {

class HostReadBuffer {
 public:
  static constexpr int64_t kBlockFloats = 1024;

  explicit HostReadBuffer(int64_t bytes)
      : blocks_(bytes / (kBlockFloats * 4)), data_(new float[static_cast<std::size_t>(blocks_ * kBlockFloats)]) {
    for (int64_t i = 0; i < blocks_ * kBlockFloats; ++i) data_[static_cast<std::size_t>(i)] = static_cast<float>(i & 1023);
  }

  int64_t bytes() const { return blocks_ * kBlockFloats * 4; }

  // Reads the whole buffer once on `pool`; returns a sum so the reads cannot be dropped.
  float read_all(ThreadPool& pool) const {
    std::vector<float> partial(static_cast<std::size_t>(blocks_), 0.0f);  // one slot per chunk's first block
    pool.parallel_for(blocks_, [&](int64_t begin, int64_t end) {
      float sum = 0.0f;
#ifdef __AVX2__
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (int64_t i = begin * kBlockFloats; i < end * kBlockFloats; i += 32)
        for (int j = 0; j < 4; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_load_ps(data_.get() + i + j * 8));
      float lanes[8];
      _mm256_storeu_ps(lanes, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
      for (float lane : lanes) sum += lane;
#else
      for (int64_t i = begin * kBlockFloats; i < end * kBlockFloats; ++i) sum += data_[static_cast<std::size_t>(i)];
#endif
      partial[static_cast<std::size_t>(begin)] = sum;
    });
    float total = 0.0f;
    for (float value : partial) total += value;
    return total;
  }

 private:
  int64_t blocks_;
  std::unique_ptr<float[]> data_;
};

}  // namespace deepinfer::bench

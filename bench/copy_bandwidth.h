#pragma once
// The memory-bandwidth reference of decode_step_bench: a plain copy, timed in the same run, whose
// bytes read + written per second bound what a memory-bound decode step can reach.
#include <cstdint>
#include <string>

namespace deepinfer::bench {

struct CopyBandwidth {
  int64_t bytes = 0;             // size of one copy (read once, written once)
  double median_seconds = 0;     // of the timed copies
  double bytes_per_second = 0;   // 2 * bytes / median_seconds: read + written
  std::string how;               // one line saying what was timed
};

// cudaMemcpy device to device of `bytes` (halved until two buffers fit in the free memory),
// `repeats` copies timed one by one with cudaEvents after an untimed one; the median.
// Defined in cuda_copy_bandwidth.cu, built only with the CUDA backend (DEEPINFER_BENCH_CUDA).
CopyBandwidth cuda_copy_bandwidth(int device, int64_t bytes, int repeats);

}  // namespace deepinfer::bench

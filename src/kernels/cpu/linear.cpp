// kernels::linear on the CPU: checks the weight descriptor, then runs the fastest path this build
// has on the process-wide thread pool.
#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/linear_cpu.h"

namespace deepinfer::kernels::cpu {
namespace {

const char* encoding_name(WeightEncoding encoding) {
  switch (encoding) {
    case WeightEncoding::F32: return "F32";
    case WeightEncoding::BF16: return "BF16";
    case WeightEncoding::FP8_E4M3: return "FP8_E4M3";
    case WeightEncoding::FP4_E2M1: return "FP4_E2M1";
  }
  return "unknown";
}

// A descriptor the loader got wrong would otherwise read out of bounds, so it is an Error.
void check_weight(const WeightMatrix& w) {
  const char* name = encoding_name(w.encoding);
  if (w.rows < 0 || w.cols < 0) fail("linear: ", name, " weight has negative shape [", w.rows, ", ", w.cols, "]");
  if (w.rows > 0 && w.cols > 0 && w.data == nullptr) fail("linear: ", name, " weight has no data");
  if (w.encoding != WeightEncoding::FP8_E4M3 && w.encoding != WeightEncoding::FP4_E2M1) return;
  if (w.block_rows < 1 || w.block_cols < 1)
    fail("linear: ", name, " weight has block size ", w.block_rows, "x", w.block_cols, "; both must be at least 1");
  if (w.scale_encoding != ScaleEncoding::None && w.scales == nullptr) fail("linear: ", name, " weight has no scales");
  if (w.encoding == WeightEncoding::FP4_E2M1 && (w.cols % 2 != 0 || w.cols % w.block_cols != 0))
    fail("linear: FP4_E2M1 weight has ", w.cols, " columns; it needs an even number and a multiple of its group size ",
         w.block_cols);
}

}  // namespace

bool linear_path_available(LinearPath path) {
#ifdef __AVX2__
  (void)path;
  return true;
#else
  return path == LinearPath::Portable;
#endif
}

LinearPath default_linear_path() {
  return linear_path_available(LinearPath::Avx2) ? LinearPath::Avx2 : LinearPath::Portable;
}

void linear(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool, LinearPath path) {
  check_weight(weight);
  if (tokens < 0) fail("linear: negative token count ", tokens);
  if (!linear_path_available(path)) fail("linear: the AVX2 path is not compiled into this build");
  if (tokens == 0 || weight.rows == 0) return;
  if (weight.cols == 0) {
    std::fill(y, y + tokens * weight.rows, 0.0f);
    return;
  }
#ifdef __AVX2__
  if (path == LinearPath::Avx2) return linear_avx2(x, tokens, weight, y, pool);
#endif
  linear_portable(x, tokens, weight, y, pool);
}

}  // namespace deepinfer::kernels::cpu

namespace deepinfer::kernels {

namespace {

// Products smaller than this run on the calling thread: waking the pool costs 3 to 14 us on the
// 2-CPU machine (docs/BENCHMARKS.md), more than such a product takes. Same bits either way (the
// paths are thread-count invariant).
constexpr int64_t kMinThreadedMultiplyAdds = 64 * 1024;

ThreadPool& calling_thread_only() {
  static ThreadPool pool(1);  // no workers: parallel_for runs inline and touches no shared state
  return pool;
}

}  // namespace

void linear(const float* x, int64_t tokens, const WeightMatrix& weight, float* y) {
  const bool small = tokens * weight.rows * weight.cols < kMinThreadedMultiplyAdds;
  cpu::linear(x, tokens, weight, y, small ? calling_thread_only() : default_thread_pool(), cpu::default_linear_path());
}

}  // namespace deepinfer::kernels

// kernels::linear on the CPU: checks the weight descriptor, then runs the fastest path this build
// has on the process-wide thread pool.
#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/linear_cpu.h"

namespace deepinfer::kernels::cpu {

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
  check_weight(weight, "linear");
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

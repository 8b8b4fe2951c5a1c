// kernels::linear on the CPU: checks the weight descriptor, then runs the path picked for this
// process (the widest the CPU has, or DEEPINFER_CPU_ISA) on the process-wide thread pool.
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "kernels/cpu/linear_cpu.h"

namespace deepinfer::kernels::cpu {

namespace {

bool cpu_has_avx512() {
#if defined(DEEPINFER_AVX512_KERNELS) && (defined(__GNUC__) || defined(__clang__))
  // libgcc's and compiler-rt's feature bits include the OS check (XCR0 saves the zmm state).
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

LinearPath pick_default_path() {
  const char* requested = std::getenv("DEEPINFER_CPU_ISA");
  if (requested != nullptr && *requested != '\0') {
    for (auto path : {LinearPath::Portable, LinearPath::Avx2, LinearPath::Avx512})
      if (std::string_view(requested) == linear_path_name(path)) {
        if (!linear_path_available(path))
          fail("DEEPINFER_CPU_ISA=", requested, ": this binary or this CPU has no ", requested, " kernels");
        return path;
      }
    fail("DEEPINFER_CPU_ISA must be portable, avx2 or avx512, got '", requested, "'");
  }
  for (auto path : {LinearPath::Avx512, LinearPath::Avx2})
    if (linear_path_available(path)) return path;
  return LinearPath::Portable;
}

}  // namespace

bool linear_path_available(LinearPath path) {
  switch (path) {
    case LinearPath::Portable: return true;
    case LinearPath::Avx2:
#ifdef __AVX2__
      return true;
#else
      return false;
#endif
    case LinearPath::Avx512: {
      static const bool available = cpu_has_avx512();
      return available;
    }
  }
  return false;
}

const char* linear_path_name(LinearPath path) {
  switch (path) {
    case LinearPath::Portable: return "portable";
    case LinearPath::Avx2: return "avx2";
    case LinearPath::Avx512: return "avx512";
  }
  return "unknown";
}

LinearPath default_linear_path() {
  static const LinearPath path = pick_default_path();
  return path;
}

void linear(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool, LinearPath path) {
  check_weight(weight, "linear");
  if (tokens < 0) fail("linear: negative token count ", tokens);
  if (!linear_path_available(path)) fail("linear: the ", linear_path_name(path), " path is not available here");
  if (tokens == 0 || weight.rows == 0) return;
  if (weight.cols == 0) {
    std::fill(y, y + tokens * weight.rows, 0.0f);
    return;
  }
  switch (path) {
    case LinearPath::Avx512:
#ifdef DEEPINFER_AVX512_KERNELS
      return linear_avx512(x, tokens, weight, y, pool);
#else
      break;
#endif
    case LinearPath::Avx2:
#ifdef __AVX2__
      return linear_avx2(x, tokens, weight, y, pool);
#else
      break;
#endif
    case LinearPath::Portable: break;
  }
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

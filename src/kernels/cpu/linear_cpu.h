#pragma once
// The CPU backend's linear kernels behind kernels::linear, exposed so tests can pick the pool
// and benchmarks can compare the portable and the vectorised path in one binary.
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace deepinfer::kernels::cpu {

enum class LinearPath {
  Portable,  // scalar C++, any CPU
  Avx2,      // AVX2 + FMA + F16C; only compiled when the build targets it (__AVX2__)
};

bool linear_path_available(LinearPath path);

// Avx2 when available, else Portable: what kernels::linear runs.
LinearPath default_linear_path();

// kernels::linear on `pool` with `path`. Both paths are batch invariant and thread-count
// invariant, each with its own fixed reduction order, so they agree only to rounding.
// Throws deepinfer::Error for an inconsistent WeightMatrix or an unavailable path.
void linear(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool,
            LinearPath path);

// The paths themselves; `weight` is already validated and every dimension is positive.
void linear_portable(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool);
#ifdef __AVX2__
void linear_avx2(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool);
#endif

}  // namespace deepinfer::kernels::cpu

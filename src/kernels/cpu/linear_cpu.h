#pragma once
// The CPU backend's linear kernels behind kernels::linear, exposed so tests can pick the pool
// and benchmarks can compare the paths in one binary. One binary holds every path its compiler
// can build; the process picks the widest the CPU has, once, at first use.
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/kernels.h"

namespace deepinfer::kernels::cpu {

enum class LinearPath {
  Portable,  // scalar C++, any CPU
  Avx2,      // AVX2 + FMA + F16C; only compiled when the build targets it (__AVX2__)
  Avx512,    // AVX-512 F/BW/VL/DQ; compiled into x86-64 builds, run where the CPU has it
};

// Compiled into this binary and supported by this CPU (and its OS: the AVX-512 state is saved).
bool linear_path_available(LinearPath path);

const char* linear_path_name(LinearPath path);  // "portable", "avx2", "avx512"

// What kernels::linear runs: DEEPINFER_CPU_ISA (portable, avx2 or avx512) when set, else the
// widest available path. Decided once per process; an unknown or unavailable DEEPINFER_CPU_ISA
// throws deepinfer::Error naming the variable.
LinearPath default_linear_path();

// kernels::linear on `pool` with `path`. Every path is batch invariant and thread-count
// invariant, each with its own fixed reduction order, so they agree only to rounding.
// Throws deepinfer::Error for an inconsistent WeightMatrix or an unavailable path.
void linear(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool,
            LinearPath path);

// The paths themselves; `weight` is already validated and every dimension is positive.
void linear_portable(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool);
#ifdef __AVX2__
void linear_avx2(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool);
#endif
#ifdef DEEPINFER_AVX512_KERNELS
void linear_avx512(const float* x, int64_t tokens, const WeightMatrix& weight, float* y, ThreadPool& pool);
#endif

}  // namespace deepinfer::kernels::cpu

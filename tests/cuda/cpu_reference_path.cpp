// The CPU backend these tests hold the CUDA backend against runs the AVX2 linear kernels, whatever
// the host's widest path is (DEEPINFER_CPU_ISA, unless the caller set it).
//
// Why a fixed path: every CPU path is exact up to its own f32 reduction order, and so is CUDA, but
// V4.1 rounds its window cache to FP8 and its compressed cache and indexer vectors to FP4 (the
// quantisation it was trained with), so a last-bit difference before such a rounding can move a
// value across a rounding boundary, and the 1e-3 logit tolerance here does not absorb a whole FP4
// step. On v41/tiny_bf16 the CPU paths differ among themselves by up to 0.027 in logits for that
// reason (portable vs AVX2 0.021, AVX-512 vs AVX2 0.027, with every routing and top-k decision
// equal), while CUDA stays within 1e-3 of AVX2, the path its kernels were validated against.
// What these tests check is the CUDA kernels, so the reference must be one fixed path.
#include <cstdlib>

#include "kernels/cpu/linear_cpu.h"

namespace {

const bool kReferencePathPinned = [] {
  if (deepinfer::kernels::cpu::linear_path_available(deepinfer::kernels::cpu::LinearPath::Avx2))
    setenv("DEEPINFER_CPU_ISA", "avx2", /*overwrite=*/0);
  return true;
}();

}  // namespace

#pragma once
// Hopper's warpgroup MMA and bulk copies as the sm_90a kernels use them (inline PTX: CCCL wraps
// the copies and barriers, not wgmma). Compiled only into the sm_90a image (__CUDA_ARCH_FEAT_SM90_ALL);
// the host never launches those kernels on other devices.
#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::kernels::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier and the bulk copy engine ----

__device__ __forceinline__ void barrier_init(uint64_t* barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals));
}

// The initialised barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// `bytes` from global `source` into shared `target`, completing on `barrier` (this thread's
// arrival with the transaction count).
__device__ __forceinline__ void bulk_copy(void* target, const void* source, uint32_t bytes, uint64_t* barrier) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(target)),
               "l"(source), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
}

__device__ __forceinline__ void barrier_wait(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "waiting:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra waiting;\n"
      "}\n" ::"r"(shared_address(barrier)),
      "r"(parity)
      : "memory");
}

// ---- wgmma ----

// A K-major operand in shared memory without swizzle: core matrices of 8 rows x 16 bytes (128
// contiguous bytes), `k_stride` bytes from a core matrix to the next along K, `row_stride` to the
// next 8 rows.
__device__ __forceinline__ uint64_t kmajor_descriptor(const void* start, uint32_t k_stride, uint32_t row_stride) {
  const uint64_t address = shared_address(start);
  return ((address & 0x3FFFFu) >> 4) | (uint64_t{(k_stride >> 4) & 0x3FFFu} << 16) |
         (uint64_t{(row_stride >> 4) & 0x3FFFu} << 32);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Registers the compiler must treat as written here: reads of an asynchronous MMA's results stay
// after the wait that completes it, and its operands' writes before the MMA.
template <int kCount>
__device__ __forceinline__ void fence_registers(float (&values)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(values[i])::"memory");
}
__device__ __forceinline__ void fence_registers(uint32_t& value) { asm volatile("" : "+r"(value)::"memory"); }

// d (+)= A B: m64 nN k16 (N = 2 x d's size: 16, 32, 48, 64 or 96), BF16 operands, f32 accumulators; A from
// registers (each warp's 16 rows in mma.sync m16n8k16's A layout), B (K-major) from shared memory.
// accumulate false: d = A B.
__device__ __forceinline__ void wgmma_bf16(float (&d)[8], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint64_t b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred keep;\n"
      "setp.ne.b32 keep, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, "
      "{%8, %9, %10, %11}, %12, keep, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(static_cast<int>(accumulate)));
}

__device__ __forceinline__ void wgmma_bf16(float (&d)[16], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint64_t b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred keep;\n"
      "setp.ne.b32 keep, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, keep, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(static_cast<int>(accumulate)));
}

__device__ __forceinline__ void wgmma_bf16(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint64_t b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred keep;\n"
      "setp.ne.b32 keep, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, keep, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(static_cast<int>(accumulate)));
}

__device__ __forceinline__ void wgmma_bf16(float (&d)[24], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint64_t b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred keep;\n"
      "setp.ne.b32 keep, %29, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23}, "
      "{%24, %25, %26, %27}, %28, keep, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(static_cast<int>(accumulate)));
}

__device__ __forceinline__ void wgmma_bf16(float (&d)[48], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint64_t b, bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred keep;\n"
      "setp.ne.b32 keep, %53, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, "
      "{%48, %49, %50, %51}, %52, keep, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b), "r"(static_cast<int>(accumulate)));
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// Whether the current device runs the sm_90a kernels (compute capability 9.0), asked once per device.
bool device_is_hopper();

}  // namespace deepinfer::kernels::cuda::sm90

#pragma once
// Device-side helpers shared by the kernels of kernels/cuda: the checkpoint number formats decoded
// exactly as core/float_formats.h decodes them, fixed-order reductions, and launch sizing.
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda/cuda_kernels.h"

namespace deepinfer::kernels::cuda::detail {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Blocks for a grid-stride loop over `items` with `threads` a block: enough to fill the device
// many times over, never more than the grid's x limit.
inline unsigned grid_for(int64_t items, int threads) {
  const int64_t blocks = (items + threads - 1) / threads;
  constexpr int64_t kMaxBlocks = int64_t{1} << 20;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

inline cudaStream_t native(Stream stream) { return reinterpret_cast<cudaStream_t>(stream); }

// ---- programmatic dependent launch (sm_90 on) ----
//
// A decode step is ~300 short kernels in a row, and at one token the gaps between them (the next
// grid's launch and block set-up after the previous one drains) cost more than the step's bytes
// (docs/BENCHMARKS.md, "The small kernels of a batch-1 step"). Every kernel here is launched with
// launch(), which lets the next kernel in the stream start while this one finishes, and begins
// with await_previous_grid(): it touches no global memory before the kernel before it has
// completed and its writes are visible, so the overlap is the launch and set-up only, and reads
// and writes keep the stream's order (a kernel that waited can only finish after its own
// predecessor did, so the order holds along the whole chain). allow_next_grid() at the same place
// lets the next grid's blocks be scheduled as this grid's last blocks start, instead of when they
// exit. DEEPINFER_PDL=0 launches without it (each kernel then starts after the one before has
// completed, and the two instructions do nothing), for comparison.
__device__ __forceinline__ void await_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

bool programmatic_launch_enabled();  // check.cpp: DEEPINFER_PDL, read once

// The current device's SM count, read once a device (check.cpp); 0 where it cannot be read.
int current_device_sm_count();

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic_launch_enabled() ? 1 : 0;
  // An error is the runtime's last error, which the caller's check_launch reads.
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// ---- number formats (core/float_formats.h) ----

__device__ __forceinline__ float quiet_nan() { return __uint_as_float(0x7fc00000u); }

__device__ __forceinline__ float bf16_value(uint32_t bits) { return __uint_as_float((bits & 0xffffu) << 16); }

// e4m3fn: 1.4.3, bias 7, subnormals, S.1111.111 = NaN, no infinities.
__device__ __forceinline__ float e4m3_value(uint32_t byte) {
  const uint32_t exponent = (byte >> 3) & 0xfu;
  const uint32_t mantissa = byte & 0x7u;
  if (exponent == 0xfu && mantissa == 0x7u) return quiet_nan();
  const float magnitude = exponent == 0 ? static_cast<float>(mantissa) * (1.0f / 512.0f)
                                        : __uint_as_float(((exponent + 120u) << 23) | (mantissa << 20));
  return (byte & 0x80u) ? -magnitude : magnitude;
}

// e2m1: {0, .5, 1, 1.5, 2, 3, 4, 6}, sign in bit 3; only the low nibble is read.
__device__ __forceinline__ float e2m1_value(uint32_t nibble) {
  const uint32_t exponent = (nibble >> 1) & 0x3u;
  const uint32_t mantissa = nibble & 0x1u;
  const float magnitude =
      exponent == 0 ? (mantissa ? 0.5f : 0.0f) : __uint_as_float(((exponent + 126u) << 23) | (mantissa << 22));
  return (nibble & 0x8u) ? -magnitude : magnitude;
}

// e8m0: 2^(b - 127); 255 is NaN; 0 is the subnormal 2^-127.
__device__ __forceinline__ float e8m0_value(uint32_t byte) {
  if (byte == 255u) return quiet_nan();
  if (byte == 0u) return __uint_as_float(1u << 22);
  return __uint_as_float(byte << 23);
}

// Little-endian loads from addresses of any alignment.
__device__ __forceinline__ uint32_t load_u16_bytes(const uint8_t* p) { return uint32_t{p[0]} | (uint32_t{p[1]} << 8); }
__device__ __forceinline__ uint32_t load_u32_bytes(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

// item / divisor and item % divisor for a flat index; 32-bit when both fit (a 64-bit division
// is a subroutine call, a 32-bit one a few instructions).
__device__ __forceinline__ void split_index(int64_t item, int64_t divisor, int64_t& quotient, int64_t& remainder) {
  if (((item | divisor) >> 32) == 0) {
    const auto q = static_cast<uint32_t>(item) / static_cast<uint32_t>(divisor);
    quotient = q;
    remainder = static_cast<int64_t>(static_cast<uint32_t>(item) - q * static_cast<uint32_t>(divisor));
  } else {
    quotient = item / divisor;
    remainder = item - quotient * divisor;
  }
}

// ---- reductions in a fixed order ----

// Butterfly over the warp: every lane ends with the same bits (addition is commutative, so the
// two lanes of each exchange compute the same sum), and the order depends on nothing but the
// lane values.
__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(kFullMask, value, offset);
  return value;
}

__device__ __forceinline__ double warp_sum(double value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(kFullMask, value, offset);
  return value;
}

__device__ __forceinline__ float warp_max(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  return value;
}

// Block-wide sum of one value per thread (blockDim.x a multiple of 32, at most 1024): warps
// butterfly, then warp 0 sums the warp totals in a butterfly too. Every thread gets the result.
// `scratch` holds 32 values; the call starts and ends with a barrier, so it may be reused.
template <typename T>
__device__ __forceinline__ T block_sum(T value, T* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  value = warp_sum(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  if (warp == 0) {
    T total = lane < warps ? scratch[lane] : T(0);
    total = warp_sum(total);
    if (lane == 0) scratch[0] = total;
  }
  __syncthreads();
  const T result = scratch[0];
  __syncthreads();
  return result;
}

__device__ __forceinline__ float block_max(float value, float* scratch) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int warps = static_cast<int>(blockDim.x) / kWarp;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  if (warp == 0) {
    float total = lane < warps ? scratch[lane] : -INFINITY;
    total = warp_max(total);
    if (lane == 0) scratch[0] = total;
  }
  __syncthreads();
  const float result = scratch[0];
  __syncthreads();
  return result;
}

// The model's scalar functions (model/ops.h), with the accurate libdevice math.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

}  // namespace deepinfer::kernels::cuda::detail

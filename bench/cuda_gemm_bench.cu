// The decode GEMMs of DeepSeek V4.1-Flash and V4-Flash on one GPU (issue 13): our
// kernels::cuda::linear on the tensor cores against cuBLASLt on the same shape, and both against the
// byte bound (the bytes the call must move at the device's measured copy bandwidth). A plain main(),
// not Google Benchmark.
//
//   cuda_gemm_bench [--tokens 1,16,64,256] [--repeats 20] [--warmup 2] [--rotation-mb M] [--copy-gb 4]
//                   [--device N] [--only TEXT] [--cublas-output f32|bf16] [--check-all] [--seed S]
//                   [--json FILE]
//
// For each matrix of the shape table (kShapes: the real dense decode projections) and token count:
//   ours          kernels::cuda::linear with a full LinearWorkspace (tensor-core path where
//                 linear_mma_supports, else the SIMT kernel, which the row then says): f32 x in,
//                 f32 y out, weights in our stored encoding (FP8 e4m3 + E8M0 block scales, or BF16).
//   cuBLASLt BF16 BF16 weights x BF16 activations -> f32 (or --cublas-output bf16), compute 32F: for BF16
//                 matrices the same weight bytes we read; for FP8 matrices the weights dequantised to
//                 BF16 (exact), a reference point that reads twice our weight bytes.
//   cuBLASLt FP8  only for 128x128-block matrices (V4): e4m3 x e4m3 with
//                 CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F weight scales and
//                 CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F activation scales (the one DeepSeek-style
//                 combination cuBLASLt runs on sm_90; it rejects 1 token). cuBLASLt has no mode for
//                 V4.1's 32x32 blocks (../shared/docs/cuda.md section 5), so that column is "n/a" there.
// cuBLASLt runs the first algorithm cublasLtMatmulAlgoGetHeuristic returns, with a 32 MiB workspace;
// what it rejects (no algorithm, or NOT_SUPPORTED / INVALID_VALUE / ARCH_MISMATCH from the call) is
// reported as unsupported. Its timings leave out converting the f32 activations to BF16 / FP8 (done
// once, untimed), which a real step would pay; ours include our own activation split (split_rows).
//
// Timing: each variant's calls are captured into one CUDA graph of back-to-back calls and the graph
// is replayed: --warmup untimed replays, then --repeats replays each timed alone with cudaEvents; the
// figure is the median replay time / calls. So launch gaps inside a graph count, as they do in a
// decode step's graph. Every call of a graph reads its own copy of the weights (at least
// --rotation-mb MiB of copies, default max(256, 4 x L2)), so weights come from HBM as in a decode
// step, not from L2; activations and outputs are shared (they are L2-resident in a real step too).
//
// The bound: weight bytes (codes + one E8M0 byte per scale block, or 2 per BF16 weight) + f32
// activations in + f32 outputs out, divided by a device-to-device cudaMemcpy's read + written bytes
// per second measured at the start of the run (cuda_copy_bandwidth.cu, --copy-gb).
//
// Checks (a broken kernel must not yield a fast number silently): at the smallest token count of each
// matrix (every count with --check-all), ours against cuBLASLt BF16 on the same (dequantised) weights:
// max |ours - ref| <= 1e-2 * max |ref|; and at every count it runs, cuBLASLt FP8 against ours within
// 1e-1 * max |ours| (activations rounded to e4m3 cost a few percent; a wrong scale layout costs ~100%).
// Any failed check makes the exit status 1.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "copy_bandwidth.h"
#include "cuda_bench_common.cuh"
#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"

namespace {

using deepinfer::fail;
using deepinfer::str_cat;
using deepinfer::kernels::ScaleEncoding;
using deepinfer::kernels::WeightEncoding;
using deepinfer::kernels::WeightMatrix;
namespace kc = deepinfer::kernels::cuda;

// ---------------------------------------------------------------------------------------------
// The shapes: one decode call each, [rows = output features, cols = input features].

struct Shape {
  const char* model;
  const char* matrix;
  int64_t rows;
  int64_t cols;
  WeightEncoding encoding;  // FP8_E4M3 (E8M0 scales over block x block) or BF16
  int64_t block;            // FP8 scale block edge: 32 (V4.1) or 128 (V4); 0 for BF16
};

// V4.1-Flash: tests/data/configs/v41_flash.json (text_config): hidden_size 5120, q_lora_rank 1280,
// num_attention_heads 64 x head_dim 512, one KV head (K = V), o_groups 8, o_lora_rank 1024,
// moe_intermediate_size 2304, vocab_size 129280; dense weights FP8 e4m3 with weight_block_size
// [32, 32] and ue8m0 scales; the LM head BF16. Names as src/model/attention.cpp and moe.cpp load them.
// V4-Flash: tests/data/configs/v4_flash.json: hidden_size 4096, q_lora_rank 1024, 64 heads x 512,
// o_groups 8, o_lora_rank 1024, moe_intermediate_size 2048; FP8 e4m3 [128, 128] blocks, ue8m0 scales.
constexpr Shape kShapes[] = {
    // attn.wq_a: [q_lora_rank, hidden]
    {"V4.1-Flash", "wq_a", 1280, 5120, WeightEncoding::FP8_E4M3, 32},
    // attn.wq_b: [heads * head_dim, q_lora_rank]
    {"V4.1-Flash", "wq_b", 32768, 1280, WeightEncoding::FP8_E4M3, 32},
    // attn.wkv: [head_dim, hidden] (the single shared K = V head)
    {"V4.1-Flash", "wkv", 512, 5120, WeightEncoding::FP8_E4M3, 32},
    // attn.wo_a, one of its o_groups row slices: [o_lora_rank, heads * head_dim / o_groups]; a step
    // runs 8 of these calls (src/backend/cuda/cuda_backend.cpp, the grouped output)
    {"V4.1-Flash", "wo_a/group", 1024, 4096, WeightEncoding::FP8_E4M3, 32},
    // attn.wo_b: [hidden, o_groups * o_lora_rank]
    {"V4.1-Flash", "wo_b", 5120, 8192, WeightEncoding::FP8_E4M3, 32},
    // ffn.shared_experts.w1 (w3 has the same shape): [moe_intermediate_size, hidden]
    {"V4.1-Flash", "shared.w1", 2304, 5120, WeightEncoding::FP8_E4M3, 32},
    // ffn.shared_experts.w2: [hidden, moe_intermediate_size]
    {"V4.1-Flash", "shared.w2", 5120, 2304, WeightEncoding::FP8_E4M3, 32},
    // head.weight: [vocab_size, hidden], BF16
    {"V4.1-Flash", "head", 129280, 5120, WeightEncoding::BF16, 0},
    // attn.wq_a: [q_lora_rank, hidden]
    {"V4-Flash", "wq_a", 1024, 4096, WeightEncoding::FP8_E4M3, 128},
    // attn.wq_b: [heads * head_dim, q_lora_rank]
    {"V4-Flash", "wq_b", 32768, 1024, WeightEncoding::FP8_E4M3, 128},
    // attn.wo_b: [hidden, o_groups * o_lora_rank]
    {"V4-Flash", "wo_b", 4096, 8192, WeightEncoding::FP8_E4M3, 128},
    // ffn.shared_experts.w1 (and w3): [moe_intermediate_size, hidden]
    {"V4-Flash", "shared.w1", 2048, 4096, WeightEncoding::FP8_E4M3, 128},
};

std::string format_name(const Shape& s) {
  if (s.encoding == WeightEncoding::BF16) return "bf16";
  return str_cat("fp8/", s.block, "x", s.block);
}

constexpr std::size_t kCublasWorkspaceBytes = std::size_t{32} << 20;
constexpr int kMinCallsPerGraph = 10;    // amortises a replay's launch over at least this many calls
constexpr double kOursTolerance = 1e-2;  // of max |ref|: BF16-rounded activations cost ~1e-3
constexpr double kFp8Tolerance = 1e-1;   // of max |ours|: e4m3-rounded activations cost a few 1e-2
constexpr float kE4m3Max = 448.0f;

// ---------------------------------------------------------------------------------------------
// Errors: every CUDA and cuBLASLt status checked, failures as deepinfer::Error naming the call.

void check(cublasStatus_t status, const std::string& what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt: ", what, ": ", cublasLtGetStatusName(status), " (", cublasLtGetStatusString(status), ")");
}

// The statuses by which cuBLASLt declines a configuration (as opposed to failing while running it).
bool is_rejection(cublasStatus_t status) {
  return status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE ||
         status == CUBLAS_STATUS_ARCH_MISMATCH;
}

// ---------------------------------------------------------------------------------------------
// The random fills of the weight formats.

__global__ void fill_bf16_kernel(__nv_bfloat16* out, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __float2bfloat16_rn(random_unit(seed, static_cast<uint64_t>(i)));
}

// Any e4m3 code but the two NaNs (S.1111.111): flipping the low bit makes them +-448.
__global__ void fill_e4m3_kernel(uint8_t* out, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    uint8_t code = static_cast<uint8_t>(random_bits(seed, static_cast<uint64_t>(i)));
    if ((code & 0x7F) == 0x7F) code ^= 0x01;
    out[i] = code;
  }
}

__device__ inline float e4m3_value(uint8_t code) {
  __nv_fp8_e4m3 value;
  value.__x = code;
  return static_cast<float>(value);
}

// W as BF16: code x 2^(e - 127) is exact in BF16 (3 mantissa bits, exponents well inside range).
__global__ void dequantize_fp8_kernel(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols,
                                      int64_t block, __nv_bfloat16* out) {
  const int64_t scale_cols = ceil_div(cols, block);
  const int64_t count = rows * cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const int exponent = scales[(r / block) * scale_cols + c / block];
    out[i] = __float2bfloat16_rn(ldexpf(e4m3_value(codes[i]), exponent - 127));
  }
}

// Our [row blocks, col blocks] E8M0 bytes as cuBLASLt's BLK128x128_32F weight scales: f32, K-major
// (the col-block index contiguous), each row block's run padded to a multiple of 4 (cuBLAS docs,
// "128-element 1D and 128x128 2D block scaling", scaling factors layouts: L4 x ceil(M / 128)).
__global__ void blk128_scales_kernel(const uint8_t* e8m0, int64_t row_blocks, int64_t col_blocks,
                                     int64_t padded_col_blocks, float* out) {
  const int64_t count = row_blocks * col_blocks;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t rb = i / col_blocks, cb = i % col_blocks;
    out[rb * padded_col_blocks + cb] = ldexpf(1.0f, static_cast<int>(e8m0[i]) - 127);
  }
}

__global__ void to_bf16_kernel(const float* x, int64_t count, __nv_bfloat16* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __float2bfloat16_rn(x[i]);
}

// x [tokens, cols] as e4m3 codes with one f32 scale per token and 128 columns (amax / 448), the
// scales in cuBLASLt's VEC128_32F layout for B: N-major, [cols / 128][tokens]. One warp a block.
__global__ void quantize_vec128_kernel(const float* x, int64_t tokens, int64_t cols, uint8_t* codes, float* scales) {
  const int64_t col_blocks = cols / 128;
  const int64_t warps = tokens * col_blocks;
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; w < warps;
       w += int64_t{gridDim.x} * blockDim.x / 32) {
    const int64_t t = w / col_blocks, cb = w % col_blocks;
    const float* in = x + t * cols + cb * 128 + lane * 4;
    float amax = 0;
    for (int j = 0; j < 4; ++j) amax = fmaxf(amax, fabsf(in[j]));
    for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
    const float scale = amax > 0 ? amax / kE4m3Max : 1.0f;
    uint8_t* out = codes + t * cols + cb * 128 + lane * 4;
    for (int j = 0; j < 4; ++j) out[j] = __nv_fp8_e4m3(in[j] / scale).__x;
    if (lane == 0) scales[cb * tokens + t] = scale;
  }
}

// ---------------------------------------------------------------------------------------------
// A matrix's device copies: `copies` identical replicas, each at a 256-byte-aligned offset, so
// that successive calls of a graph read weights L2 has not seen.

struct Replicas {
  DeviceBuffer slab;
  std::size_t stride = 0;  // bytes between copies
  int copies = 0;
  uint8_t* at(int copy) const { return slab.bytes_at(static_cast<std::size_t>(copy % copies) * stride); }
};

int copies_for(std::size_t bytes, std::size_t rotation_bytes) {
  if (bytes == 0) return 1;
  return static_cast<int>(std::clamp<std::size_t>((rotation_bytes + bytes - 1) / bytes, 1, 1024));
}

// `bytes` per copy, `copies` of them; copy 0 filled by `fill_first`, the rest copied from it.
Replicas replicate(std::size_t bytes, int copies, const std::string& what,
                   const std::function<void(uint8_t*)>& fill_first) {
  Replicas r;
  r.stride = round_up(std::max<std::size_t>(bytes, 1), 256);
  r.copies = copies;
  r.slab = DeviceBuffer(r.stride * static_cast<std::size_t>(copies), what);
  fill_first(r.at(0));
  for (int c = 1; c < copies; ++c)
    check(cudaMemcpy(r.at(c), r.at(0), bytes, cudaMemcpyDeviceToDevice), str_cat("cudaMemcpy (", what, " copies)"));
  return r;
}

// The weights of one shape in every form a variant reads.
struct ShapeWeights {
  Replicas ours_data;    // our codes: e4m3 bytes or BF16
  Replicas ours_scales;  // FP8: E8M0 [row blocks, col blocks], padded to whole 4-byte words
  Replicas bf16;         // cuBLASLt BF16's A: for FP8 shapes the dequantised weights
  bool bf16_is_ours = false;
  Replicas blk128_scales;   // V4 FP8: f32 BLK128x128 scales for cuBLASLt FP8, one set per copy
  double stored_bytes = 0;  // what our kernel must read: codes + scale bytes (unpadded)
  bool no_nan_codes = false;  // checked as the CUDA weight store checks at upload

  WeightMatrix ours(int copy, const Shape& s) const {
    WeightMatrix m;
    m.encoding = s.encoding;
    m.rows = s.rows;
    m.cols = s.cols;
    m.data = ours_data.at(copy);
    if (s.encoding == WeightEncoding::FP8_E4M3) {
      m.scale_encoding = ScaleEncoding::E8M0;
      m.scales = ours_scales.at(copy);
      m.block_rows = s.block;
      m.block_cols = s.block;
      m.no_nan_codes = no_nan_codes;
      m.max_e8m0 = kMaxFilledE8m0;  // as the weight store finds it at upload: the folded decode
    }
    return m;
  }
};

ShapeWeights make_weights(const Shape& s, std::size_t rotation_bytes, uint64_t seed) {
  ShapeWeights w;
  const int64_t count = s.rows * s.cols;
  if (s.encoding == WeightEncoding::BF16) {
    const std::size_t bytes = static_cast<std::size_t>(count) * 2;
    w.ours_data = replicate(bytes, copies_for(bytes, rotation_bytes), "BF16 weights", [&](uint8_t* first) {
      fill_bf16_kernel<<<grid_for(count), 256>>>(reinterpret_cast<__nv_bfloat16*>(first), count, seed);
      launched("fill_bf16_kernel");
    });
    w.bf16_is_ours = true;
    w.stored_bytes = static_cast<double>(bytes);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (weights)");
    return w;
  }
  const int64_t row_blocks = ceil_div(s.rows, s.block), col_blocks = ceil_div(s.cols, s.block);
  const int64_t scale_count = row_blocks * col_blocks;
  const std::size_t code_bytes = static_cast<std::size_t>(count);
  // Whole words, as WeightStore pads them: the kernel copies the scale array by 4-byte words.
  const std::size_t scale_bytes = round_up(static_cast<std::size_t>(scale_count), 4);
  const int copies = copies_for(code_bytes + scale_bytes, rotation_bytes);
  w.ours_data = replicate(code_bytes, copies, "FP8 weights", [&](uint8_t* first) {
    fill_e4m3_kernel<<<grid_for(count), 256>>>(first, count, seed);
    launched("fill_e4m3_kernel");
  });
  w.ours_scales = replicate(scale_bytes, copies, "E8M0 scales", [&](uint8_t* first) {
    fill_e8m0_kernel<<<grid_for(static_cast<int64_t>(scale_bytes)), 256>>>(first, static_cast<int64_t>(scale_bytes),
                                                                           seed + 1);
    launched("fill_e8m0_kernel");
  });
  w.stored_bytes = static_cast<double>(code_bytes) + static_cast<double>(scale_count);
  w.no_nan_codes = !kc::has_e4m3_nan(w.ours_data.at(0), count, nullptr);
  const std::size_t bf16_bytes = static_cast<std::size_t>(count) * 2;
  w.bf16 =
      replicate(bf16_bytes, copies_for(bf16_bytes, rotation_bytes), "dequantised BF16 weights", [&](uint8_t* first) {
        dequantize_fp8_kernel<<<grid_for(count), 256>>>(w.ours_data.at(0), w.ours_scales.at(0), s.rows, s.cols, s.block,
                                                        reinterpret_cast<__nv_bfloat16*>(first));
        launched("dequantize_fp8_kernel");
      });
  if (s.block == 128) {
    const auto padded_col_blocks = static_cast<int64_t>(round_up(static_cast<std::size_t>(col_blocks), 4));
    const std::size_t bytes = static_cast<std::size_t>(row_blocks * padded_col_blocks) * 4;
    w.blk128_scales = replicate(bytes, copies, "BLK128x128 f32 scales", [&](uint8_t* first) {
      check(cudaMemset(first, 0, bytes), "cudaMemset (BLK128x128 scales)");
      blk128_scales_kernel<<<grid_for(scale_count), 256>>>(w.ours_scales.at(0), row_blocks, col_blocks,
                                                           padded_col_blocks, reinterpret_cast<float*>(first));
      launched("blk128_scales_kernel");
    });
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (weights)");
  return w;
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt: y [tokens, rows] = x [tokens, cols] W^T as column-major D [rows x tokens] = op(A) B with
// A = W (stored [cols x rows] column-major, ld cols, op T), B = x ([cols x tokens], ld cols, op N):
// the "TN" form FP8 needs on Hopper; m = rows, n = tokens, k = cols.

class LtHandle {
 public:
  LtHandle() { check(cublasLtCreate(&handle_), "cublasLtCreate"); }
  ~LtHandle() { cublasLtDestroy(handle_); }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

// One planned matmul: its descriptors and the heuristic's best algorithm.
class LtPlan {
 public:
  LtPlan() = default;
  ~LtPlan() {
    if (preference_) cublasLtMatmulPreferenceDestroy(preference_);
    if (d_) cublasLtMatrixLayoutDestroy(d_);
    if (b_) cublasLtMatrixLayoutDestroy(b_);
    if (a_) cublasLtMatrixLayoutDestroy(a_);
    if (desc_) cublasLtMatmulDescDestroy(desc_);
  }
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;

  struct Fp8Scales {
    const void* weight_blk128 = nullptr;      // BLK128x128_32F (per call: set_weight_scales)
    const void* activation_vec128 = nullptr;  // VEC128_32F
  };

  // Empty on success; else why cuBLASLt declined (its status name).
  std::string plan(cublasLtHandle_t handle, const Shape& s, int64_t tokens, cudaDataType_t input, cudaDataType_t output,
                   const Fp8Scales* fp8) {
    check(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const int32_t transpose = CUBLAS_OP_T, no_transpose = CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, transpose, "TRANSA");
    set(CUBLASLT_MATMUL_DESC_TRANSB, no_transpose, "TRANSB");
    if (fp8) {
      const int32_t weight_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      const int32_t activation_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
      set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, weight_mode, "A_SCALE_MODE");
      set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, activation_mode, "B_SCALE_MODE");
      set_weight_scales(fp8->weight_blk128);
      set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, fp8->activation_vec128, "B_SCALE_POINTER");
    }
    check(cublasLtMatrixLayoutCreate(&a_, input, static_cast<uint64_t>(s.cols), static_cast<uint64_t>(s.rows), s.cols),
          "cublasLtMatrixLayoutCreate (A)");
    check(cublasLtMatrixLayoutCreate(&b_, input, static_cast<uint64_t>(s.cols), static_cast<uint64_t>(tokens), s.cols),
          "cublasLtMatrixLayoutCreate (B)");
    check(cublasLtMatrixLayoutCreate(&d_, output, static_cast<uint64_t>(s.rows), static_cast<uint64_t>(tokens), s.rows),
          "cublasLtMatrixLayoutCreate (D)");
    check(cublasLtMatmulPreferenceCreate(&preference_), "cublasLtMatmulPreferenceCreate");
    const uint64_t workspace = kCublasWorkspaceBytes;
    check(cublasLtMatmulPreferenceSetAttribute(preference_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                               sizeof workspace),
          "cublasLtMatmulPreferenceSetAttribute (MAX_WORKSPACE_BYTES)");
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(handle, desc_, a_, b_, d_, d_, preference_, 1, &result, &returned);
    if (is_rejection(status)) return str_cat("heuristic: ", cublasLtGetStatusName(status));
    check(status, "cublasLtMatmulAlgoGetHeuristic");
    if (returned == 0) return "heuristic: no algorithm";
    if (result.state != CUBLAS_STATUS_SUCCESS) return str_cat("heuristic: ", cublasLtGetStatusName(result.state));
    algo_ = result.algo;
    workspace_bytes_ = result.workspaceSize;
    return {};
  }

  // The weight scales of the copy a call reads; the value is read when the call is enqueued.
  void set_weight_scales(const void* scales) { set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scales, "A_SCALE_POINTER"); }

  cublasStatus_t run(cublasLtHandle_t handle, const void* a, const void* b, void* d, void* workspace,
                     cudaStream_t stream) const {
    static const float one = 1.0f, zero = 0.0f;
    return cublasLtMatmul(handle, desc_, &one, a, a_, b, b_, &zero, d, d_, d, d_, &algo_, workspace, workspace_bytes_,
                          stream);
  }

 private:
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value, const char* name) {
    check(cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof value),
          str_cat("cublasLtMatmulDescSetAttribute (", name, ")"));
  }

  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulPreference_t preference_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  std::size_t workspace_bytes_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Host side: comparisons and options.

std::vector<float> download(const void* device, int64_t count, bool bf16) {
  std::vector<float> out(static_cast<std::size_t>(count));
  if (!bf16) {
    check(cudaMemcpy(out.data(), device, out.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
    return out;
  }
  std::vector<uint16_t> bits(out.size());
  check(cudaMemcpy(bits.data(), device, bits.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const uint32_t word = uint32_t{bits[i]} << 16;
    std::memcpy(&out[i], &word, 4);
  }
  return out;
}

struct Check {
  std::string what;  // e.g. "ours vs cuBLASLt BF16"
  std::string model, matrix;
  int64_t tokens = 0;
  double max_diff = 0;
  double max_ref = 0;
  double tolerance = 0;  // of max_ref
  bool passed = false;
};

Check compare(const std::string& what, const Shape& s, int64_t tokens, const std::vector<float>& got,
              const std::vector<float>& ref, double tolerance) {
  Check c;
  c.what = what;
  c.model = s.model;
  c.matrix = s.matrix;
  c.tokens = tokens;
  c.tolerance = tolerance;
  bool finite = true;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(ref[i])) finite = false;
    c.max_diff = std::max(c.max_diff, static_cast<double>(std::fabs(got[i] - ref[i])));
    c.max_ref = std::max(c.max_ref, static_cast<double>(std::fabs(ref[i])));
  }
  c.passed = finite && c.max_ref > 0 && c.max_diff <= tolerance * c.max_ref;
  if (!finite) c.max_diff = NAN;
  return c;
}

struct Options {
  std::vector<int64_t> tokens = {1, 16, 64, 256};
  int repeats = 20;
  int warmup = 2;
  double rotation_mb = 0;  // 0: max(256 MiB, 4 x L2)
  double copy_gb = 4.0;
  int device = 0;
  std::string only;
  bool bf16_output = false;
  bool check_all = false;
  uint64_t seed = 1;
  std::string json;
};

[[noreturn]] void usage(const std::string& message, int status = 2) {
  std::fprintf(status ? stderr : stdout,
               "%s%s"
               "usage: cuda_gemm_bench [--tokens 1,16,64,256] [--repeats 20] [--warmup 2] [--rotation-mb M]\n"
               "       [--copy-gb 4] [--device N] [--only TEXT] [--cublas-output f32|bf16] [--check-all]\n"
               "       [--seed S] [--json FILE]\n"
               "Times kernels::cuda::linear (tensor cores) against cuBLASLt BF16 and FP8 128x128-block matmuls\n"
               "and the byte bound on the decode GEMMs of V4.1-Flash and V4-Flash (see the top of\n"
               "bench/cuda_gemm_bench.cu).\n"
               "  --tokens        token counts (rows of x) to time each matrix at\n"
               "  --repeats       timed graph replays per variant; the median is reported\n"
               "  --warmup        untimed replays before them\n"
               "  --rotation-mb   weight copies cycled through per graph: at least this many MiB of them\n"
               "                  (0, the default: max(256, 4 x L2)); a value under a matrix's size (e.g. 1)\n"
               "                  keeps one copy, which times L2-warm weights where the matrix fits in L2\n"
               "  --copy-gb       size of the cudaMemcpy whose bandwidth sets the byte bound\n"
               "  --only          only matrices whose \"model/matrix\" contains TEXT (e.g. V4-Flash, wq_b)\n"
               "  --cublas-output cuBLASLt's output type (f32, as ours, or bf16)\n"
               "  --check-all     check ours against cuBLASLt BF16 at every token count, not the smallest\n"
               "  --json FILE     also write the rows and checks as JSON\n",
               message.c_str(), message.empty() ? "" : "\n");
  std::exit(status);
}

int64_t parse_int(const std::string& flag, const std::string& text, int64_t minimum) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < minimum)
    usage(str_cat("cuda_gemm_bench: ", flag, " ", text, ": expected an integer >= ", minimum));
  return value;
}

double parse_number(const std::string& flag, const std::string& text, double minimum) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= minimum))
    usage(str_cat("cuda_gemm_bench: ", flag, " ", text, ": expected a number >= ", minimum));
  return value;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(str_cat("cuda_gemm_bench: ", flag, " needs a value"));
      return argv[++i];
    };
    if (flag == "--tokens") {
      o.tokens.clear();
      const std::string list = value();
      std::size_t at = 0;
      while (at <= list.size()) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        o.tokens.push_back(parse_int(flag, list.substr(at, comma - at), 1));
        at = comma + 1;
      }
    } else if (flag == "--repeats") o.repeats = static_cast<int>(parse_int(flag, value(), 1));
    else if (flag == "--warmup") o.warmup = static_cast<int>(parse_int(flag, value(), 0));
    else if (flag == "--rotation-mb") o.rotation_mb = parse_number(flag, value(), 0);
    else if (flag == "--copy-gb") o.copy_gb = parse_number(flag, value(), 0.001);
    else if (flag == "--device") o.device = static_cast<int>(parse_int(flag, value(), 0));
    else if (flag == "--only") o.only = value();
    else if (flag == "--cublas-output") {
      const std::string type = value();
      if (type != "f32" && type != "bf16") usage("cuda_gemm_bench: --cublas-output takes f32 or bf16");
      o.bf16_output = type == "bf16";
    } else if (flag == "--check-all") o.check_all = true;
    else if (flag == "--seed") o.seed = static_cast<uint64_t>(parse_int(flag, value(), 0));
    else if (flag == "--json") o.json = value();
    else if (flag == "--help" || flag == "-h") usage("", 0);
    else usage(str_cat("cuda_gemm_bench: unknown option ", flag));
  }
  std::sort(o.tokens.begin(), o.tokens.end());
  o.tokens.erase(std::unique(o.tokens.begin(), o.tokens.end()), o.tokens.end());
  return o;
}

// ---------------------------------------------------------------------------------------------
// One row of results.

struct LtResult {
  std::optional<double> us;
  std::string status;  // "ok", "n/a: ...", "unsupported: ..."
};

struct Row {
  const Shape* shape = nullptr;
  int64_t tokens = 0;
  double ours_us = 0;
  bool ours_tensor_cores = false;
  LtResult bf16, fp8;
  double bytes = 0;
  double bound_us = 0;
  int calls_per_graph = 0;
  int weight_copies = 0;
};

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string json_number(std::optional<double> value) {
  if (!value || !std::isfinite(*value)) return "null";
  char text[64];
  std::snprintf(text, sizeof text, "%.6g", *value);
  return text;
}

std::string cell(std::optional<double> value, const char* format, const std::string& otherwise) {
  if (!value) return otherwise;
  char text[32];
  std::snprintf(text, sizeof text, format, *value);
  return text;
}

std::optional<double> ratio(double ours, const LtResult& lt) {
  if (!lt.us) return std::nullopt;
  return ours / *lt.us;
}

const char* short_status(const LtResult& r) {
  if (r.us) return "";
  return r.status.rfind("n/a", 0) == 0 ? "-" : "unsupported";
}

void print_row(const Row& r) {
  const Shape& s = *r.shape;
  std::printf("%-10s %-10s %6lld x %-5lld %-11s %4lld %9.2f%s %11s %11s %8.2f %9.2f %9s %9s %7.0f\n", s.model, s.matrix,
              static_cast<long long>(s.rows), static_cast<long long>(s.cols), format_name(s).c_str(),
              static_cast<long long>(r.tokens), r.ours_us, r.ours_tensor_cores ? " " : "*",
              cell(r.bf16.us, "%.2f", short_status(r.bf16)).c_str(),
              cell(r.fp8.us, "%.2f", short_status(r.fp8)).c_str(), r.bound_us, r.ours_us / r.bound_us,
              cell(ratio(r.ours_us, r.bf16), "%.2f", "-").c_str(), cell(ratio(r.ours_us, r.fp8), "%.2f", "-").c_str(),
              r.bytes / (r.ours_us * 1e-6) / 1e9);
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// The run.

struct Context {
  explicit Context(const Options& o) : options(o) {}
  const Options& options;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  DeviceBuffer lt_workspace;
  DeviceBuffer simt_split;         // kLinearSplitFloats floats: LinearWorkspace::split
  DeviceBuffer x_split, partials;  // the tensor-core workspace, grown to each call's need
  std::vector<Check> checks;
  std::vector<std::string> notes;  // what did not run or went unchecked, and why
};

void grow(DeviceBuffer& buffer, std::size_t bytes, const char* what) {
  if (buffer.bytes() < bytes) buffer = DeviceBuffer(bytes, what);
}

int calls_for(int copies) { return std::max(copies, kMinCallsPerGraph); }

// Times one cuBLASLt variant on copies of `a`; result.us empty (with the reason) when cuBLASLt
// declines it. `output` receives a direct call's result (copy 0) for the checks.
LtResult time_cublaslt(Context& ctx, const Shape& s, int64_t tokens, cudaDataType_t input, const Replicas& a,
                       const void* b, void* output, const Replicas* blk128_scales, const void* activation_scales,
                       const char* label) {
  const cudaDataType_t out_type = ctx.options.bf16_output ? CUDA_R_16BF : CUDA_R_32F;
  LtPlan plan;
  LtPlan::Fp8Scales fp8{blk128_scales ? blk128_scales->at(0) : nullptr, activation_scales};
  const std::string declined = plan.plan(ctx.lt, s, tokens, input, out_type, blk128_scales ? &fp8 : nullptr);
  LtResult result;
  auto unsupported = [&](const std::string& why) {
    result.status = str_cat("unsupported: ", why);
    ctx.notes.push_back(str_cat(s.model, " ", s.matrix, " tokens ", tokens, ": cuBLASLt ", label, " ", result.status));
    return result;
  };
  if (!declined.empty()) return unsupported(declined);
  const cublasStatus_t first = plan.run(ctx.lt, a.at(0), b, output, ctx.lt_workspace.as<void>(), ctx.stream);
  if (is_rejection(first)) {
    (void)cudaGetLastError();
    return unsupported(str_cat("cublasLtMatmul: ", cublasLtGetStatusName(first)));
  }
  check(first, str_cat("cublasLtMatmul (", label, ")"));
  check(cudaStreamSynchronize(ctx.stream), str_cat("cudaStreamSynchronize (cuBLASLt ", label, ")"));
  result.us = time_graph(ctx.stream, calls_for(a.copies), ctx.options.warmup, ctx.options.repeats, [&](int call) {
    if (blk128_scales) plan.set_weight_scales(blk128_scales->at(call));
    check(plan.run(ctx.lt, a.at(call), b, output, ctx.lt_workspace.as<void>(), ctx.stream),
          str_cat("cublasLtMatmul (", label, ", captured)"));
  });
  result.status = "ok";
  return result;
}

Row run_shape_tokens(Context& ctx, const Shape& s, const ShapeWeights& w, int64_t tokens, bool check_ours) {
  const Options& o = ctx.options;
  const bool bf16_out = o.bf16_output;
  const int64_t x_count = tokens * s.cols, y_count = tokens * s.rows;
  const uint64_t seed = o.seed * 7919 + static_cast<uint64_t>(tokens);

  DeviceBuffer x(static_cast<std::size_t>(x_count) * 4, "x");
  DeviceBuffer x_bf16(static_cast<std::size_t>(x_count) * 2, "x as BF16");
  DeviceBuffer y_ours(static_cast<std::size_t>(y_count) * 4, "y (ours)");
  DeviceBuffer y_bf16(static_cast<std::size_t>(y_count) * (bf16_out ? 2 : 4), "y (cuBLASLt BF16)");
  fill_floats_kernel<<<grid_for(x_count), 256, 0, ctx.stream>>>(x.as<float>(), x_count, seed);
  launched("fill_floats_kernel");
  to_bf16_kernel<<<grid_for(x_count), 256, 0, ctx.stream>>>(x.as<float>(), x_count, x_bf16.as<__nv_bfloat16>());
  launched("to_bf16_kernel");
  const bool fp8_blocks = s.block == 128;
  DeviceBuffer x_fp8, x_scales, y_fp8;
  if (fp8_blocks) {
    x_fp8 = DeviceBuffer(static_cast<std::size_t>(x_count), "x as e4m3");
    x_scales = DeviceBuffer(static_cast<std::size_t>(tokens * (s.cols / 128)) * 4, "x's VEC128 scales");
    y_fp8 = DeviceBuffer(static_cast<std::size_t>(y_count) * (bf16_out ? 2 : 4), "y (cuBLASLt FP8)");
    quantize_vec128_kernel<<<grid_for(tokens * (s.cols / 128) * 32), 256, 0, ctx.stream>>>(
        x.as<float>(), tokens, s.cols, x_fp8.as<uint8_t>(), x_scales.as<float>());
    launched("quantize_vec128_kernel");
  }
  check(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize (activations)");

  Row row;
  row.shape = &s;
  row.tokens = tokens;
  row.weight_copies = w.ours_data.copies;
  row.calls_per_graph = calls_for(w.ours_data.copies);
  row.bytes = w.stored_bytes + 4.0 * static_cast<double>(x_count) + 4.0 * static_cast<double>(y_count);

  // Ours, with every workspace buffer the backend would pass.
  const WeightMatrix first = w.ours(0, s);
  row.ours_tensor_cores = kc::linear_mma_supports(first);
  kc::LinearWorkspace workspace;
  workspace.split = ctx.simt_split.as<float>();
  if (row.ours_tensor_cores) {
    workspace.x_split_words = kc::linear_mma_split_words(tokens, first);
    workspace.partial_floats = kc::linear_mma_partial_floats(tokens, first);
    grow(ctx.x_split, static_cast<std::size_t>(workspace.x_split_words) * 4, "linear_mma x_split");
    grow(ctx.partials, static_cast<std::size_t>(std::max<int64_t>(workspace.partial_floats, 1)) * 4,
         "linear_mma partials");
    workspace.x_split = ctx.x_split.as<uint32_t>();
    workspace.partials = workspace.partial_floats > 0 ? ctx.partials.as<float>() : nullptr;
  }
  kc::linear(x.as<float>(), tokens, first, y_ours.as<float>(), ctx.stream, workspace);
  check(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize (ours)");
  const std::vector<float> ours = download(y_ours.as<void>(), y_count, false);

  // cuBLASLt BF16 on the same weights (dequantised for FP8), then FP8 with 128x128 block scales.
  const Replicas& bf16_weights = w.bf16_is_ours ? w.ours_data : w.bf16;
  row.bf16 = time_cublaslt(ctx, s, tokens, CUDA_R_16BF, bf16_weights, x_bf16.as<void>(), y_bf16.as<void>(), nullptr,
                           nullptr, "BF16");
  if (check_ours && row.bf16.us)
    ctx.checks.push_back(compare("ours vs cuBLASLt BF16", s, tokens, ours,
                                 download(y_bf16.as<void>(), y_count, bf16_out), kOursTolerance));
  else if (check_ours)
    ctx.notes.push_back(
        str_cat(s.model, " ", s.matrix, " tokens ", tokens, ": ours unchecked (no cuBLASLt BF16 result)"));
  if (fp8_blocks) {
    row.fp8 = time_cublaslt(ctx, s, tokens, CUDA_R_8F_E4M3, w.ours_data, x_fp8.as<void>(), y_fp8.as<void>(),
                            &w.blk128_scales, x_scales.as<void>(), "FP8 BLK128x128 x VEC128");
    if (row.fp8.us)
      ctx.checks.push_back(compare("cuBLASLt FP8 block vs ours", s, tokens,
                                   download(y_fp8.as<void>(), y_count, bf16_out), ours, kFp8Tolerance));
  } else {
    row.fp8.status =
        s.encoding == WeightEncoding::BF16 ? "n/a: BF16 weights" : "n/a: no cuBLASLt scale mode for 32x32 blocks";
  }

  // Ours timed last, after its result was kept for the checks above.
  row.ours_us = time_graph(ctx.stream, row.calls_per_graph, o.warmup, o.repeats, [&](int call) {
    kc::linear(x.as<float>(), tokens, w.ours(call, s), y_ours.as<float>(), ctx.stream, workspace);
  });
  return row;
}

void print_check(const Check& c) {
  std::printf("check %-10s %-10s tokens %4lld  %-27s max |diff| %.3g of max |ref| %.3g = %.2e (tolerance %.0e): %s\n",
              c.model.c_str(), c.matrix.c_str(), static_cast<long long>(c.tokens), c.what.c_str(), c.max_diff,
              c.max_ref, c.max_ref > 0 ? c.max_diff / c.max_ref : NAN, c.tolerance, c.passed ? "ok" : "FAILED");
  std::fflush(stdout);
}

void write_json(const std::string& path, const Options& o, const cudaDeviceProp& props,
                const deepinfer::bench::CopyBandwidth& copy, std::size_t rotation_bytes, const std::vector<Row>& rows,
                const std::vector<Check>& checks, const std::vector<std::string>& notes) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) fail("cuda_gemm_bench: cannot write ", path, ": ", std::strerror(errno));
  std::string out = "{\n";
  out += str_cat("  \"device\": ", json_string(props.name), ",\n");
  out += str_cat("  \"sms\": ", props.multiProcessorCount, ",\n");
  out += str_cat("  \"l2_bytes\": ", props.l2CacheSize, ",\n");
  out += str_cat("  \"cublaslt_version\": ", cublasLtGetVersion(), ",\n");
  out += str_cat("  \"copy_bandwidth_bytes_per_second\": ", json_number(copy.bytes_per_second), ",\n");
  out += str_cat("  \"copy_how\": ", json_string(copy.how), ",\n");
  out += str_cat("  \"timing\": ",
                 json_string("CUDA graph of back-to-back calls, each on its own weight copy; median "
                             "over timed replays (cudaEvents) of replay time / calls"),
                 ",\n");
  out += str_cat("  \"repeats\": ", o.repeats, ",\n  \"warmup\": ", o.warmup, ",\n");
  out += str_cat("  \"rotation_bytes\": ", rotation_bytes, ",\n");
  out += str_cat("  \"cublas_output\": ", json_string(o.bf16_output ? "bf16" : "f32"), ",\n");
  out += "  \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const Shape& s = *r.shape;
    out += str_cat(
        "    {\"model\": ", json_string(s.model), ", \"matrix\": ", json_string(s.matrix), ", \"rows\": ", s.rows,
        ", \"cols\": ", s.cols, ", \"format\": ", json_string(format_name(s)), ", \"tokens\": ", r.tokens,
        ", \"ours_us\": ", json_number(r.ours_us),
        ", \"ours_path\": ", json_string(r.ours_tensor_cores ? "tensor cores" : "SIMT"),
        ", \"cublaslt_bf16_us\": ", json_number(r.bf16.us), ", \"cublaslt_bf16_status\": ", json_string(r.bf16.status),
        ", \"cublaslt_fp8_us\": ", json_number(r.fp8.us), ", \"cublaslt_fp8_status\": ", json_string(r.fp8.status),
        ", \"bytes\": ", json_number(r.bytes), ", \"bound_us\": ", json_number(r.bound_us),
        ", \"ours_over_bound\": ", json_number(r.ours_us / r.bound_us),
        ", \"ours_over_cublaslt_bf16\": ", json_number(ratio(r.ours_us, r.bf16)),
        ", \"ours_over_cublaslt_fp8\": ", json_number(ratio(r.ours_us, r.fp8)),
        ", \"weight_copies\": ", r.weight_copies, ", \"calls_per_graph\": ", r.calls_per_graph, "}",
        i + 1 < rows.size() ? "," : "", "\n");
  }
  out += "  ],\n  \"checks\": [\n";
  for (std::size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    out += str_cat("    {\"what\": ", json_string(c.what), ", \"model\": ", json_string(c.model),
                   ", \"matrix\": ", json_string(c.matrix), ", \"tokens\": ", c.tokens,
                   ", \"max_abs_diff\": ", json_number(c.max_diff), ", \"max_abs_ref\": ", json_number(c.max_ref),
                   ", \"tolerance\": ", json_number(c.tolerance), ", \"passed\": ", c.passed ? "true" : "false", "}",
                   i + 1 < checks.size() ? "," : "", "\n");
  }
  out += "  ],\n  \"notes\": [\n";
  for (std::size_t i = 0; i < notes.size(); ++i)
    out += str_cat("    ", json_string(notes[i]), i + 1 < notes.size() ? "," : "", "\n");
  out += "  ]\n}\n";
  const bool written = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !written) fail("cuda_gemm_bench: writing ", path, " failed");
}

// The device's measured matrix rate: cuBLASLt on one square product of kRateEdge (BF16 x BF16 ->
// f32; e4m3 with BLK128x128 / VEC128 scales), TFLOP/s as 2 m n k / median time. The reference a
// prefill's matrix products are measured against (decode_step_bench prints their TFLOP/s).
constexpr int64_t kRateEdge = 8192;

__global__ void fill_ones_kernel(float* out, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = 1.0f;
}

void print_matrix_rates(Context& ctx) {
  const int64_t n = kRateEdge, count = n * n;
  const Shape square{"rate", "square", n, n, WeightEncoding::BF16, 0};
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  DeviceBuffer x(static_cast<std::size_t>(count) * 4, "rate: f32");
  DeviceBuffer a(static_cast<std::size_t>(count) * 2, "rate: A"), b(static_cast<std::size_t>(count) * 2, "rate: B");
  DeviceBuffer d(static_cast<std::size_t>(count) * 4, "rate: D");
  fill_floats_kernel<<<grid_for(count), 256, 0, ctx.stream>>>(x.as<float>(), count, 17);
  to_bf16_kernel<<<grid_for(count), 256, 0, ctx.stream>>>(x.as<float>(), count, a.as<__nv_bfloat16>());
  to_bf16_kernel<<<grid_for(count), 256, 0, ctx.stream>>>(x.as<float>(), count, b.as<__nv_bfloat16>());
  launched("rate: fill");
  const auto time_plan = [&](LtPlan& plan, const void* pa, const void* pb) {
    return time_graph(ctx.stream, 2, 1, 5, [&](int) {
      check(plan.run(ctx.lt, pa, pb, d.as<void>(), ctx.lt_workspace.as<void>(), ctx.stream), "cublasLtMatmul (rate)");
    });
  };
  LtPlan bf16;
  const std::string bf16_declined = bf16.plan(ctx.lt, square, n, CUDA_R_16BF, CUDA_R_32F, nullptr);
  if (bf16_declined.empty())
    std::printf("matrix rate: cuBLASLt BF16 %lld^3 -> f32: %.0f TFLOP/s\n", static_cast<long long>(n),
                flops / (time_plan(bf16, a.as<void>(), b.as<void>()) * 1e-6) / 1e12);
  else
    std::printf("matrix rate: cuBLASLt BF16 declined (%s)\n", bf16_declined.c_str());
  DeviceBuffer wscale(static_cast<std::size_t>((n / 128) * (n / 128)) * 4, "rate: BLK128 scales");
  DeviceBuffer xscale(static_cast<std::size_t>((n / 128) * n) * 4, "rate: VEC128 scales");
  fill_e4m3_kernel<<<grid_for(count), 256, 0, ctx.stream>>>(a.as<uint8_t>(), count, 3);
  fill_e4m3_kernel<<<grid_for(count), 256, 0, ctx.stream>>>(b.as<uint8_t>(), count, 5);
  fill_ones_kernel<<<grid_for((n / 128) * (n / 128)), 256, 0, ctx.stream>>>(wscale.as<float>(), (n / 128) * (n / 128));
  fill_ones_kernel<<<grid_for((n / 128) * n), 256, 0, ctx.stream>>>(xscale.as<float>(), (n / 128) * n);
  launched("rate: fill e4m3");
  check(cudaStreamSynchronize(ctx.stream), "cudaStreamSynchronize (rate)");
  LtPlan fp8;
  LtPlan::Fp8Scales scales{wscale.as<void>(), xscale.as<void>()};
  const std::string fp8_declined = fp8.plan(ctx.lt, square, n, CUDA_R_8F_E4M3, CUDA_R_32F, &scales);
  if (fp8_declined.empty())
    std::printf("matrix rate: cuBLASLt e4m3 BLK128x128 x VEC128 %lld^3 -> f32: %.0f TFLOP/s\n",
                static_cast<long long>(n), flops / (time_plan(fp8, a.as<void>(), b.as<void>()) * 1e-6) / 1e12);
  else
    std::printf("matrix rate: cuBLASLt FP8 declined (%s)\n", fp8_declined.c_str());
}

int run(const Options& o) {
  check(cudaSetDevice(o.device), "cudaSetDevice");
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, o.device), "cudaGetDeviceProperties");
  const deepinfer::bench::CopyBandwidth copy =
      deepinfer::bench::cuda_copy_bandwidth(o.device, static_cast<int64_t>(o.copy_gb * 1e9), 10);
  const std::size_t l2 = static_cast<std::size_t>(std::max(props.l2CacheSize, 0));
  const std::size_t rotation_bytes = o.rotation_mb > 0 ? static_cast<std::size_t>(o.rotation_mb * 1048576.0)
                                                       : std::max<std::size_t>(std::size_t{256} << 20, 4 * l2);

  Context ctx(o);
  check(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  LtHandle lt;
  ctx.lt = lt.get();
  ctx.lt_workspace = DeviceBuffer(kCublasWorkspaceBytes, "cuBLASLt workspace");
  ctx.simt_split = DeviceBuffer(static_cast<std::size_t>(kc::kLinearSplitFloats) * 4, "linear split workspace");

  std::printf("device %d: %s, %d SMs, L2 %.1f MiB; cuBLASLt %zu\n", o.device, props.name, props.multiProcessorCount,
              static_cast<double>(l2) / 1048576.0, cublasLtGetVersion());
  std::printf("copy bandwidth %.0f GB/s (%s)\n", copy.bytes_per_second / 1e9, copy.how.c_str());
  print_matrix_rates(ctx);
  std::printf(
      "timing: CUDA graph of back-to-back calls (each on its own weight copy, >= %.0f MiB of copies), "
      "%d warm-up + %d timed replays, median replay time / calls\n",
      static_cast<double>(rotation_bytes) / 1048576.0, o.warmup, o.repeats);
  std::printf(
      "columns: us per call; bf16 = cuBLASLt BF16 x BF16 -> %s (FP8 rows: weights dequantised to BF16, twice "
      "our bytes); fp8 = cuBLASLt e4m3 BLK128x128 weight x VEC128 activation scales; bound = (weights + scales "
      "+ f32 x + f32 y) / copy bandwidth; * = ours ran the SIMT kernel\n\n",
      o.bf16_output ? "bf16" : "f32");
  std::printf("%-10s %-10s %14s %-11s %4s %10s %11s %11s %8s %9s %9s %9s %7s\n", "model", "matrix", "rows x cols",
              "format", "tok", "ours", "bf16", "fp8", "bound", "ours/bnd", "ours/bf16", "ours/fp8", "GB/s");

  std::vector<Row> rows;
  uint64_t shape_seed = o.seed;
  for (const Shape& s : kShapes) {
    ++shape_seed;
    if (!o.only.empty() && str_cat(s.model, "/", s.matrix).find(o.only) == std::string::npos) continue;
    const ShapeWeights weights = make_weights(s, rotation_bytes, shape_seed * 1000003);
    for (std::size_t t = 0; t < o.tokens.size(); ++t) {
      const std::size_t checks_before = ctx.checks.size();
      Row row = run_shape_tokens(ctx, s, weights, o.tokens[t], t == 0 || o.check_all);
      row.bound_us = row.bytes / copy.bytes_per_second * 1e6;
      print_row(row);
      for (std::size_t c = checks_before; c < ctx.checks.size(); ++c)
        if (!ctx.checks[c].passed) print_check(ctx.checks[c]);
      rows.push_back(std::move(row));
    }
  }

  std::printf("\n");
  for (const Check& c : ctx.checks) print_check(c);
  for (const std::string& note : ctx.notes) std::printf("note: %s\n", note.c_str());
  if (!o.json.empty()) write_json(o.json, o, props, copy, rotation_bytes, rows, ctx.checks, ctx.notes);
  check(cudaStreamDestroy(ctx.stream), "cudaStreamDestroy");
  const auto failed = std::count_if(ctx.checks.begin(), ctx.checks.end(), [](const Check& c) { return !c.passed; });
  if (failed > 0) {
    std::fprintf(stderr, "cuda_gemm_bench: %lld check(s) FAILED: the timings of those rows are not trustworthy\n",
                 static_cast<long long>(failed));
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    return run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_gemm_bench: %s\n", e.what());
    return 1;
  }
}

// The dense tensor-core linear for calls of several tokens on Hopper: wgmma (m64 nN k16, N = 16, 32
// or 64 tokens a block) with the decoded weights as A in registers and the block's tokens as B in
// shared memory, fed by the bulk copy engine. Same products, same sums, same order as
// linear_mma.cu, whose token blocks each read their activations through L1 into registers for
// every m16n8k16 MMA (operand traffic per MMA set its time past 16 tokens: docs/BENCHMARKS.md, "A
// weight tile decoded once per block").
//
// Bits. A token's result must not depend on which kernel its call ran (batch invariance), so
// this kernel keeps linear_mma's every choice: the column ranges (linear_mma_plan.h), the chunk
// order, the k order inside an MMA (mma_common.cuh: MMA j of a chunk takes split words 2 j and
// 2 j + 1 of each lane's segment), the hi plane's MMA from zero added to its sum by an f32 add,
// mid and lo accumulated in place (mid first), and y = hi + (mid + lo). It assumes the tensor
// cores sum an m64nNk16's k16 products as they sum an m16n8k16's (CudaLinearMma tests compare
// the two kernels' bits on the device).
//
// Layout of the split input (split_for_wgmma_kernel): for x chunk c (128 columns), token block b
// (N tokens), plane p, MMA j and k half s, the N tokens' 16-byte rows (4 words: lane segment q's
// word 2 j + s for q = 0..3) one after another. A (c, b) is one contiguous stage (48 KiB at N = 64)
// that one bulk copy brings in, and (p, j) within it is the MMA's B: core matrices of 8 tokens x
// 16 bytes, N x 16 bytes from k half 0 to 1, 128 bytes from 8 tokens to the next.
//
// Block: two warpgroups (128 rows, as linear_mma's blocks, so the same ranges), each warp 16
// rows; blockIdx.x = token blocks (fastest: blocks reading the same weight rows run together and
// share them through L2), y = 128-row blocks, z = column ranges. Per MMA step a warpgroup issues
// three wgmmas (hi into one of two scratch accumulators, from zero; mid and lo into its sum) and
// adds the step before's scratch once that step completes, so the tensor cores stay fed.
#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/dense_decode.cuh"
#include "kernels/cuda/linear_mma_plan.h"
#include "kernels/cuda/mma_common.cuh"
#include "kernels/cuda/sm90/wgmma.cuh"

namespace deepinfer::kernels::cuda::dense {
namespace {

using namespace detail;
using namespace mma;

constexpr int kWarpgroups = 2;
constexpr int kThreads = kWarpgroups * 4 * kWarp;
constexpr int kRowsPerWarp = 16;
static_assert(kRowsPerBlock == int64_t{kWarpgroups} * 4 * kRowsPerWarp);
constexpr int kStages = 3;
constexpr int kMmasPerChunk = 8;
constexpr int64_t kCoreRowWords = 4;  // 16 bytes
constexpr int64_t kMaxGrid = 65535;

// A block's N tokens (the wgmma's n: 16, 32 or 64) set its stage: one (plane, j, k half) is N
// core-matrix rows (N x 16 bytes), a chunk's stage 48 of them (N = 64: 48 KiB).
template <int N>
struct TokenBlock {
  static constexpr int64_t kHalfTileWords = int64_t{N} * kCoreRowWords;
  static constexpr int64_t kStageWords = int64_t{kPlanes} * kMmasPerChunk * 2 * kHalfTileWords;
  static constexpr uint32_t kStageBytes = static_cast<uint32_t>(kStageWords * 4);
  static constexpr size_t kSharedBytes = size_t{kStages} * kStageBytes;
};

int64_t padded_tokens(int64_t tokens, int n) { return (tokens + n - 1) / n * n; }

// One thread per (x chunk, token block, j, s, token n, lane segment q): the column pair of split
// word 2 j + s of segment 4 c + q, its three planes' words; tokens past the call's are zeros.
template <int N>
__global__ void split_for_wgmma_kernel(const float* __restrict__ x, int64_t tokens, int64_t token_blocks,
                                       int64_t cols, int64_t x_stride, uint32_t* __restrict__ out) {
  constexpr int64_t kHalfTileWords = TokenBlock<N>::kHalfTileWords, kStageWords = TokenBlock<N>::kStageWords;
  await_previous_grid();
  const int64_t per_chunk = token_blocks * kMmasPerChunk * 2 * kHalfTileWords;
  const int64_t total = (cols / kChunkColumns) * per_chunk;
  for (int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < total;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t chunk, rest, block, within;
    split_index(index, per_chunk, chunk, rest);
    split_index(rest, kMmasPerChunk * 2 * kHalfTileWords, block, within);
    const int q = static_cast<int>(within % kCoreRowWords);
    const int n = static_cast<int>((within / kCoreRowWords) % N);
    const int js = static_cast<int>(within / kHalfTileWords);  // 2 j + s: the split word
    const int64_t t = block * N + n;
    uint32_t first[kPlanes] = {}, second[kPlanes] = {};
    if (t < tokens) {
      const int64_t c = split_word_column((chunk * 4 + q) * kSegmentWords + js);
      split_value(x[t * x_stride + c], first);
      split_value(x[t * x_stride + c + 4], second);
    }
    const int j = js / 2, s = js % 2;
    uint32_t* stage = out + (chunk * token_blocks + block) * kStageWords;
#pragma unroll
    for (int p = 0; p < kPlanes; ++p)
      stage[((p * kMmasPerChunk + j) * 2 + s) * kHalfTileWords + n * kCoreRowWords + q] = first[p] | (second[p] << 16);
  }
}

template <WeightEncoding E, bool NanCodes, bool Folded, int N>
__global__ void __launch_bounds__(kThreads, N == 16 ? 2 : 1)
    linear_wgmma_kernel(const uint32_t* __restrict__ x_split, int64_t tokens, int64_t token_blocks, WeightMatrix w,
                        Groups grouping, int64_t chunks_each, float* __restrict__ out, int64_t out_stride) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  constexpr int64_t kHalfTileWords = TokenBlock<N>::kHalfTileWords, kStageWords = TokenBlock<N>::kStageWords;
  constexpr uint32_t kStageBytes = TokenBlock<N>::kStageBytes;
  constexpr int kAcc = N / 2;  // per thread, of one m64nN accumulator
  extern __shared__ __align__(128) uint32_t stages[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ uint32_t released[kStages];  // warps done with the stage's chunk
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, q = lane % 4;
  const int64_t block_row = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock;
  const int64_t first_row = block_row + int64_t{warp} * kRowsPerWarp;  // warpgroup w's warps: rows 64 w ..
  const bool live = first_row < w.rows;  // warp-uniform: rows is a multiple of 16
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * N;
  const int64_t chunks = w.cols / kChunkColumns;
  const int64_t begin = static_cast<int64_t>(blockIdx.z) * chunks_each;
  const int64_t end = begin + chunks_each < chunks ? begin + chunks_each : chunks;

  // The block's group (its 128 rows lie in one: linear_wgmma_runs). A warp past the weight's rows
  // runs on the group's row 0 (the block's barriers need every warp) and stores nothing.
  const GroupWeights weights = group_weights_of(w, grouping, block_row);
  const int64_t group = weights.index;
  const void* data = weights.data;
  const uint8_t* scales = weights.scales;
  const int64_t local_first_row = live ? first_row - weights.first_row : 0;
  const auto row_of = [&](int, int r) { return local_first_row + g + 8 * r; };
  RowPointers<E, 1> rows;  // data only: the loop keeps its scales
  const int64_t row_bytes = E == WeightEncoding::BF16 ? w.cols * 2 : w.cols;
#pragma unroll
  for (int r = 0; r < 2; ++r) rows.data[0][r] = static_cast<const uint8_t*>(data) + row_of(0, r) * row_bytes;

  // The next chunk's weight bytes and scale bytes are loaded while this chunk's MMAs run: one or two
  // blocks an SM are 8 or 16 warps, too few to hide a load's latency behind other warps.
  uint4 bytes[2][2][kHalfLoads<E>];  // [row g / g + 8][half]
  uint32_t scale_bytes[2];
  const auto load_chunk = [&](int64_t chunk) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      scale_bytes[r] = chunk_scale_byte<E>(scales, w, chunk, row_of(0, r));
#pragma unroll
      for (int h = 0; h < 2; ++h) load_row_half<E>(rows.data[0][r], chunk, h, bytes[r][h]);
    }
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);
      released[s] = 0;
    }
    barrier_init_fence();
  }
  // The weights are no kernel's output: their first chunk loads while the previous kernel ends.
  if (begin < end) load_chunk(begin);
  __syncthreads();
  await_previous_grid();  // the split input is the previous kernel's
  const uint32_t* source = x_split + ((group * chunks + begin) * token_blocks + blockIdx.x) * kStageWords;
  const int64_t chunk_step = token_blocks * kStageWords;
  if (threadIdx.x == 0)
    for (int s = 0; s < kStages && begin + s < end; ++s)
      bulk_copy(stages + s * kStageWords, source + s * chunk_step, kStageBytes, &full[s]);

  float hi[kAcc], mid_lo[kAcc], scratch[2][kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) hi[i] = mid_lo[i] = scratch[0][i] = scratch[1][i] = 0.0f;
  for (int64_t c = begin; c < end; ++c) {
    const int64_t k = c - begin;
    const int stage = static_cast<int>(k % kStages);
    HalfA<1> a[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t scale = decode_scale<Folded>(scale_bytes[r]);
#pragma unroll
      for (int h = 0; h < 2; ++h) decode_row_half<E, NanCodes, Folded>(bytes[r][h], scale, a[h].words[0][r]);
    }
    if (c + 1 < end) load_chunk(c + 1);
    barrier_wait(&full[stage], static_cast<uint32_t>((k / kStages) & 1));
    const uint32_t* tiles = stages + stage * kStageWords;
#pragma unroll
    for (int j = 0; j < kMmasPerChunk; ++j) {
      const int h = j / 4, ii = (j % 4) / 2, n0 = (j % 2) * 2;
      const uint32_t a0 = a[h].words[0][0][ii][n0], a1 = a[h].words[0][1][ii][n0];
      const uint32_t a2 = a[h].words[0][0][ii][n0 + 1], a3 = a[h].words[0][1][ii][n0 + 1];
      uint64_t b[kPlanes];
#pragma unroll
      for (int p = 0; p < kPlanes; ++p)
        b[p] = kmajor_descriptor(tiles + (p * kMmasPerChunk + j) * 2 * kHalfTileWords,
                                 static_cast<uint32_t>(kHalfTileWords * 4), 8 * kCoreRowWords * 4);
      wgmma_fence();
      wgmma_bf16(scratch[j % 2], a0, a1, a2, a3, b[0], false);
      wgmma_bf16(mid_lo, a0, a1, a2, a3, b[1], true);
      wgmma_bf16(mid_lo, a0, a1, a2, a3, b[2], true);
      wgmma_commit();
      if (j > 0) {  // step j - 1 is done: its hi products into the sum
        wgmma_wait<1>();
        fence_registers(scratch[(j - 1) % 2]);
#pragma unroll
        for (int i = 0; i < kAcc; ++i) hi[i] += scratch[(j - 1) % 2][i];
      }
    }
    wgmma_wait<0>();
    fence_registers(scratch[(kMmasPerChunk - 1) % 2]);
#pragma unroll
    for (int i = 0; i < kAcc; ++i) hi[i] += scratch[(kMmasPerChunk - 1) % 2][i];
    // The last warp done with the stage refills it: no barrier holds the warpgroups in step, so
    // one decodes its next chunk while the other's MMAs run.
    if (lane == 0) {
      __threadfence_block();
      if (atomicAdd(&released[stage], 1u) == kThreads / kWarp - 1) {
        released[stage] = 0;
        if (c + kStages < end)
          bulk_copy(stages + stage * kStageWords, source + (k + kStages) * chunk_step, kStageBytes, &full[stage]);
      }
    }
  }
  fence_registers(mid_lo);
  if (!live) return;
  out += static_cast<int64_t>(blockIdx.z) * tokens * w.rows;  // a range's partial sums (out_stride = rows)
  // Accumulator i of this lane: row g + 8 ((i / 2) % 2) of the warp's 16, token 8 (i / 4) + 2 q + i % 2.
#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    const int64_t t = t0 + 8 * (i / 4) + 2 * q + i % 2;
    if (t < tokens) out[t * out_stride + first_row + g + 8 * ((i / 2) % 2)] = hi[i] + mid_lo[i];
  }
#endif
}

// DEEPINFER_CUDA_WGMMA_MIN_TOKENS: calls of at least that many tokens take the wgmma kernel and no
// others (0: none), for benchmarks; unset, the measured rule of linear_wgmma_runs.
int64_t forced_min_tokens() {
  static const int64_t value = [] {
    const char* setting = std::getenv("DEEPINFER_CUDA_WGMMA_MIN_TOKENS");
    if (!setting || !*setting) return int64_t{-1};
    const long long parsed = std::atoll(setting);
    return parsed <= 0 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(parsed);
  }();
  return value;
}

// A block's tokens for a call of `tokens`: the narrowest wgmma that holds them, up to 64 (measured
// at 16-64 tokens: docs/BENCHMARKS.md, "The dense linears on wgmma").
int block_tokens(int64_t tokens) { return tokens <= 16 ? 16 : tokens <= 32 ? 32 : 64; }

template <WeightEncoding E, bool NanCodes, bool Folded, int N>
auto* wgmma_kernel() {
  auto* kernel = linear_wgmma_kernel<E, NanCodes, Folded, N>;
  static std::once_flag raised;
  std::call_once(raised, [&] {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(TokenBlock<N>::kSharedBytes)) != cudaSuccess)
      check_launch("cuda::linear_wgmma (shared memory limit)");
  });
  return kernel;
}

template <int N>
void launch_wgmma(const float* x, int64_t x_stride, int64_t tokens, const WeightMatrix& w, const Groups& grouping,
                  const ColumnRanges& ranges, float* out, int64_t out_stride, uint32_t* x_split, cudaStream_t stream) {
  const int64_t token_blocks = padded_tokens(tokens, N) / N;
  if (token_blocks > kMaxGrid || ranges.row_blocks > kMaxGrid)
    fail("cuda::linear_wgmma: ", tokens, " tokens x ", w.rows, " rows is past the grid's limits");
  const int64_t split_threads =
      (grouping.x_columns / kChunkColumns) * token_blocks * kMmasPerChunk * 2 * TokenBlock<N>::kHalfTileWords;
  launch(split_for_wgmma_kernel<N>, grid_for(split_threads, 256), 256, 0, stream, x, tokens, token_blocks,
         grouping.x_columns, x_stride, x_split);
  using Kernel = void (*)(const uint32_t*, int64_t, int64_t, WeightMatrix, Groups, int64_t, float*, int64_t);
  Kernel kernel;
  constexpr auto kFp8 = WeightEncoding::FP8_E4M3;
  if (w.encoding == WeightEncoding::BF16)
    kernel = wgmma_kernel<WeightEncoding::BF16, false, false, N>();
  else if (!w.no_nan_codes)
    kernel = wgmma_kernel<kFp8, true, false, N>();
  else if (w.max_e8m0 <= kMaxFoldedE4m3Scale)
    kernel = wgmma_kernel<kFp8, false, true, N>();
  else
    kernel = wgmma_kernel<kFp8, false, false, N>();
  const dim3 grid(static_cast<unsigned>(token_blocks), static_cast<unsigned>(ranges.row_blocks),
                  static_cast<unsigned>(ranges.count));
  launch(kernel, grid, kThreads, TokenBlock<N>::kSharedBytes, stream, x_split, tokens, token_blocks, w, grouping,
         ranges.chunks_each, out, out_stride);
}

}  // namespace

bool linear_wgmma_runs(int64_t tokens, const WeightMatrix& w, const Groups& grouping) {
  // Measured against linear_mma on the H200 (docs/BENCHMARKS.md, "The dense linears on wgmma"):
  // faster from 8 tokens on every matrix, from 2 on those of at most kFewRows rows; at a token or
  // two the big ones (the head, wq_b) stream at their bound on linear_mma.
  constexpr int64_t kFewRows = 8192;
  const int64_t forced = forced_min_tokens();
  if (forced >= 0 ? tokens < forced : tokens < 8 && (tokens < 2 || w.rows > kFewRows)) return false;
  if (grouping.group_weights && grouping.group_rows % kRowsPerBlock != 0) return false;
  if (w.encoding != WeightEncoding::BF16 && w.encoding != WeightEncoding::FP8_E4M3) return false;
  return sm90::device_is_hopper();
}

int64_t linear_wgmma_split_words(int64_t tokens, int64_t x_columns) {
  // Padded to 64 tokens: room for any block size.
  return tokens < 1 ? 0 : padded_tokens(tokens, 64) * kPlanes * (x_columns / 2);
}

void linear_wgmma(const float* x, int64_t x_stride, int64_t tokens, const WeightMatrix& w, const Groups& grouping,
                  const ColumnRanges& ranges, float* out, int64_t out_stride, uint32_t* x_split, cudaStream_t stream) {
  switch (block_tokens(tokens)) {
    case 16: return launch_wgmma<16>(x, x_stride, tokens, w, grouping, ranges, out, out_stride, x_split, stream);
    case 32: return launch_wgmma<32>(x, x_stride, tokens, w, grouping, ranges, out, out_stride, x_split, stream);
    default: return launch_wgmma<64>(x, x_stride, tokens, w, grouping, ranges, out, out_stride, x_split, stream);
  }
}

}  // namespace deepinfer::kernels::cuda::dense

namespace deepinfer::kernels::cuda::sm90 {

bool device_is_hopper() {
  static std::array<std::atomic<int8_t>, 64> known{};  // 0 unknown, 1 yes, 2 no
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= static_cast<int>(known.size())) return false;
  int8_t state = known[static_cast<size_t>(device)].load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0, minor = 0;
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
    state = ok && major == 9 && minor == 0 ? 1 : 2;
    known[static_cast<size_t>(device)].store(state, std::memory_order_relaxed);
  }
  return state == 1;
}

}  // namespace deepinfer::kernels::cuda::sm90

// The routed experts of a prefill-sized MoE call on Hopper's wgmma: tiles of 16 or 32 of an
// expert's sorted pairs, each tile's weights decoded once for all its pairs (expert_mma.cu's
// kernels decode them once per 4 or 8 pairs, which set a prefill's time: docs/BENCHMARKS.md, "The
// routed experts of a prefill on wgmma").
//
// Bits. A pair's result is expert_mma's, bit for bit, so a token's logits do not depend on the
// size of the call it came in (batch invariance; chunked prefill equals one-shot):
// - the same A words (expert_decode.cuh), the same k order (MMA j of a 128-column chunk takes
//   split words 2 j and 2 j + 1 of each lane's segment) and chunk order;
// - every plane's products of an MMA step summed from zero and added to the plane's f32 sum by
//   one rounded add (expert_mma's mma_bf16_add); a result is (hi + mid) + lo (token_sums);
// - the SwiGLU and its pair scale between the two matrices (swiglu_value), split again into
//   three planes (split_value).
// It assumes the tensor cores sum an m64nNk16's k16 products from zero as they sum an
// m16n8k16's (the dense kernels rely on the same; CudaExpertWgmma tests compare the bits).
//
// Layout of the staged activations (stage_pairs_kernel): for tile t, x chunk c, MMA j and k half
// s, the tile's 3 P columns' 16-byte rows (lane segment q's word 2 j + s for q = 0..3) one after
// another, the columns being the P pairs' hi planes, then their mid, then their lo planes. So one
// (t, c) is one contiguous stage (24 KiB at P = 32) that one bulk copy brings in, (j) within it is
// the MMA's whole B (N = 3 P: core matrices of 8 columns x 16 bytes, 3 P x 16 bytes from k half 0
// to 1, 128 bytes from 8 columns to the next), and a thread's accumulators i, i + P / 2 and i + P
// are one pair's three planes: no shuffles to sum them.
//
// Block: three warpgroups, 192 rows of one matrix (w1 or w3 in the gate / up launch, w2 in the
// down launch), each warp 16 rows; blockIdx.x = row blocks (fastest: the blocks of a tile run
// together and read its staged activations once from DRAM; with tiles fastest every row block read
// them again, 33 GB a launch at 8K tokens), y = tiles (in expert order: an expert's next tile finds
// its weights in L2). Per MMA step a warpgroup issues one wgmma into a scratch accumulator from
// zero and adds it to the sums once it completes (kScratchesFor: with two scratches, the step
// before's while this one runs).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/expert_decode.cuh"
#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/mma_common.cuh"
#include "kernels/cuda/sm90/wgmma.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;
using namespace mma;

constexpr int kRowsPerWarp = 16;
constexpr int kStages = 3;
constexpr int kMmasPerChunk = 8;
constexpr int64_t kCoreRowWords = 4;  // 16 bytes
constexpr int64_t kMaxGridY = 65535;

// A tile of P pairs: the wgmma's N = 3 P columns, one chunk's stage.
template <int P>
struct PairTile {
  static constexpr int kColumns = kPlanes * P;
  static constexpr int64_t kHalfTileWords = int64_t{kColumns} * kCoreRowWords;  // one (j, s)
  static constexpr int64_t kStageWords = int64_t{kMmasPerChunk} * 2 * kHalfTileWords;
  static constexpr uint32_t kStageBytes = static_cast<uint32_t>(kStageWords * 4);
  static constexpr size_t kSharedBytes = size_t{kStages} * kStageBytes;
  static constexpr int64_t kThreadsPerChunk = int64_t{kMmasPerChunk} * 2 * P * kCoreRowWords;
};

// One thread per (tile, chunk, j, s, pair slot n, lane segment q): the column pair of split word
// 2 j + s of segment 4 c + q of the slot's pair, its three planes' words; slots past the tile's
// pairs are zeros. The value is x[x_row[pair]] (x_row null: x[pair]), or with `up`, the SwiGLU of
// x (the gate) and up, times pair_scale[pair] when that is not null.
template <int P>
__global__ void stage_pairs_kernel(const float* __restrict__ x, const float* __restrict__ up,
                                   const int32_t* __restrict__ x_row, const int4* __restrict__ tiles,
                                   const int32_t* __restrict__ tile_count, int64_t cols, float limit,
                                   const float* __restrict__ pair_scale, uint32_t* __restrict__ out) {
  using Tile = PairTile<P>;
  await_previous_grid();
  const int64_t chunks = cols / kChunkColumns;
  const int64_t per_tile = chunks * Tile::kThreadsPerChunk;
  const int64_t total = *tile_count * per_tile;
  for (int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < total;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t t, rest, chunk, within;
    split_index(index, per_tile, t, rest);
    split_index(rest, Tile::kThreadsPerChunk, chunk, within);
    const int q = static_cast<int>(within % kCoreRowWords);
    const int n = static_cast<int>((within / kCoreRowWords) % P);
    const int js = static_cast<int>(within / (kCoreRowWords * P));  // 2 j + s: the split word
    const int4 tile = tiles[t];
    uint32_t first[kPlanes] = {}, second[kPlanes] = {};
    if (n < tile.z) {
      const int64_t pair = tile.y + n;
      const int64_t row = x_row ? x_row[pair] : pair;
      const int64_t c = split_word_column((chunk * 4 + q) * kSegmentWords + js);
      float v0 = x[row * cols + c], v1 = x[row * cols + c + 4];
      if (up) {
        v0 = swiglu_value(v0, up[row * cols + c], limit);
        v1 = swiglu_value(v1, up[row * cols + c + 4], limit);
        if (pair_scale) {
          v0 = v0 * pair_scale[pair];
          v1 = v1 * pair_scale[pair];
        }
      }
      split_value(v0, first);
      split_value(v1, second);
    }
    uint32_t* stage = out + (t * chunks + chunk) * Tile::kStageWords;
#pragma unroll
    for (int p = 0; p < kPlanes; ++p)
      stage[js * Tile::kHalfTileWords + (p * P + n) * kCoreRowWords + q] = first[p] | (second[p] << 16);
  }
}

// The matrices one launch multiplies: blockIdx.x's first row_blocks blocks take w[0] (per-expert
// descriptors) into out[0], the next row_blocks w[1] into out[1].
struct ExpertPass {
  const WeightMatrix* w[2];
  float* out[2];
  int64_t rows;  // of each matrix: out[m] is [pairs, rows]
  int64_t row_blocks;  // set by multiply, from the block's rows
};

template <int P, int kWarpgroups, int kDepth, bool Folded>
__global__ void __launch_bounds__(kWarpgroups * 4 * kWarp, 1)
    expert_wgmma_kernel(const uint32_t* __restrict__ staged, const int4* __restrict__ tiles,
                        const int32_t* __restrict__ tile_count, ExpertPass pass, int64_t cols) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace sm90;
  using Tile = PairTile<P>;
  constexpr int kAcc = Tile::kColumns / 2;  // per thread, of one m64nN accumulator
  extern __shared__ __align__(128) uint32_t stages[];
  __shared__ __align__(8) uint64_t full[kStages];
  __shared__ uint32_t released[kStages];  // warps done with the stage's chunk
  await_previous_grid();                  // the tiles and the staged pairs are earlier kernels' outputs
  const int64_t t = blockIdx.y;
  if (t >= *tile_count) return;
  const int4 tile = tiles[t];
  const int which = blockIdx.x >= pass.row_blocks ? 1 : 0;
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const int g = lane / 4, q = lane % 4;
  const int64_t first_row = (blockIdx.x - which * pass.row_blocks) * (kWarpgroups * 64) + int64_t{warp} * kRowsPerWarp;
  const bool live = first_row < pass.rows;  // warp-uniform: rows is a multiple of 16
  float* out = (which ? pass.out[1] : pass.out[0]) + tile.y * pass.rows;
  if (tile.x < 0) {  // pairs routed to no expert: zeros, as expert_mma gives them (block-uniform)
    if (live)
      for (int i = lane; i < tile.z * kRowsPerWarp; i += kWarp) out[(i / kRowsPerWarp) * pass.rows + first_row + i % kRowsPerWarp] = 0.0f;
    return;
  }
  // A warp past the matrix's rows runs on row 0 (the block's barriers need every warp) and stores nothing.
  const RowTile rows = row_tile((which ? pass.w[1] : pass.w[0])[tile.x], live ? first_row : 0);
  const int64_t chunks = cols / kChunkColumns;
  uint4 bytes[2];
  uint32_t scale_bytes[2];
  const auto load_chunk = [&](int64_t c) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      bytes[h] = load_streaming(rows.rows[h] + c * kTiledChunkBytes);
      scale_bytes[h] = __ldg(rows.scales[h] + 4 * c + q);
    }
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(&full[s], 1);
      released[s] = 0;
    }
    barrier_init_fence();
  }
  load_chunk(0);
  __syncthreads();
  const uint32_t* source = staged + t * chunks * Tile::kStageWords;
  if (threadIdx.x == 0)
    for (int s = 0; s < kStages && s < chunks; ++s)
      bulk_copy(stages + s * Tile::kStageWords, source + s * Tile::kStageWords, Tile::kStageBytes, &full[s]);

  float acc[kAcc], scratch[kDepth][kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    acc[i] = 0.0f;
#pragma unroll
    for (int d = 0; d < kDepth; ++d) scratch[d][i] = 0.0f;
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const int stage = static_cast<int>(c % kStages);
    uint32_t a[kMmasPerChunk][4];
    {
      const uint32_t scale_low = scale_pair<Folded>(scale_bytes[0]), scale_high = scale_pair<Folded>(scale_bytes[1]);
#pragma unroll
      for (int j = 0; j < kMmasPerChunk; ++j)
        e2m1_a_words<Folded>(word_of(bytes[0], j / 2), word_of(bytes[1], j / 2), scale_low, scale_high, j % 2, a[j][0],
                             a[j][1], a[j][2], a[j][3]);
    }
    if (c + 1 < chunks) load_chunk(c + 1);
    barrier_wait(&full[stage], static_cast<uint32_t>((c / kStages) & 1));
    const uint32_t* b_tiles = stages + stage * Tile::kStageWords;
#pragma unroll
    for (int j = 0; j < kMmasPerChunk; ++j) {
      const uint64_t b = kmajor_descriptor(b_tiles + j * 2 * Tile::kHalfTileWords,
                                           static_cast<uint32_t>(Tile::kHalfTileWords * 4), 8 * kCoreRowWords * 4);
      wgmma_fence();
      wgmma_bf16(scratch[j % kDepth], a[j][0], a[j][1], a[j][2], a[j][3], b, false);
      wgmma_commit();
      if constexpr (kDepth == 1) {
        wgmma_wait<0>();
        fence_registers(scratch[0]);
#pragma unroll
        for (int i = 0; i < kAcc; ++i) acc[i] += scratch[0][i];
      } else if (j > 0) {  // step j - 1 is done: its products into the sums
        wgmma_wait<1>();
        fence_registers(scratch[(j - 1) % 2]);
#pragma unroll
        for (int i = 0; i < kAcc; ++i) acc[i] += scratch[(j - 1) % 2][i];
      }
    }
    if constexpr (kDepth == 2) {
      wgmma_wait<0>();
      fence_registers(scratch[(kMmasPerChunk - 1) % 2]);
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] += scratch[(kMmasPerChunk - 1) % 2][i];
    }
    // The last warp done with the stage refills it: one warpgroup decodes its next chunk while
    // the others' MMAs run.
    if (lane == 0) {
      __threadfence_block();
      if (atomicAdd(&released[stage], 1u) == kWarpgroups * 4 - 1) {
        released[stage] = 0;
        if (c + kStages < chunks)
          bulk_copy(stages + stage * Tile::kStageWords, source + (c + kStages) * Tile::kStageWords, Tile::kStageBytes,
                    &full[stage]);
      }
    }
  }
  if (!live) return;
  // Accumulator i of this lane: row g + 8 ((i / 2) % 2) of the warp's 16, column 8 (i / 4) + 2 q +
  // i % 2; for i < P / 2 that is pair slot n's hi plane, i + P / 2 its mid, i + P its lo.
#pragma unroll
  for (int i = 0; i < P / 2; ++i) {
    const int n = 8 * (i / 4) + 2 * q + i % 2;
    if (n < tile.z) out[n * pass.rows + first_row + g + 8 * ((i / 2) % 2)] = (acc[i] + acc[i + P / 2]) + acc[i + P];
  }
#endif
}

// DEEPINFER_CUDA_EXPERT_WGMMA: 0 turns this path off, 16 or 32 forces that tile for every call of
// two pairs an expert or more; unset, the measured rule of expert_wgmma_tile_pairs.
int forced_tile_pairs() {
  static const int value = [] {
    const char* setting = std::getenv("DEEPINFER_CUDA_EXPERT_WGMMA");
    if (!setting || !*setting) return -1;
    const int parsed = std::atoi(setting);
    return parsed == 16 || parsed == 32 ? parsed : 0;
  }();
  return value;
}

template <int P, int kWarpgroups, int kDepth, bool Folded>
auto* expert_kernel() {
  auto* kernel = expert_wgmma_kernel<P, kWarpgroups, kDepth, Folded>;
  static std::once_flag raised;
  std::call_once(raised, [&] {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(PairTile<P>::kSharedBytes)) != cudaSuccess)
      check_launch("cuda::expert_wgmma (shared memory limit)");
  });
  return kernel;
}

void check_tile_pairs(const char* who, int tile_pairs) {
  if (tile_pairs != 16 && tile_pairs != 32) fail(who, ": tiles of ", tile_pairs, " pairs (16 or 32)");
}

void check_shape(const char* who, int64_t rows, int64_t cols, int64_t tile_bound) {
  if (rows < 0 || cols < 0 || tile_bound < 0)
    fail(who, ": negative size (rows ", rows, ", cols ", cols, ", tiles ", tile_bound, ")");
  if (rows % kRowsPerWarp != 0 || cols % kChunkColumns != 0)
    fail(who, ": ", rows, " x ", cols, " experts; this kernel needs rows a multiple of 16 and columns of ",
         kChunkColumns);
}

template <int P>
void stage(const float* x, const float* up, const int32_t* x_row, const int32_t* tiles, const int32_t* tile_count,
           int64_t tile_bound, int64_t cols, float limit, const float* pair_scale, uint32_t* staged,
           cudaStream_t stream) {
  launch(stage_pairs_kernel<P>, grid_for(tile_bound * (cols / kChunkColumns) * PairTile<P>::kThreadsPerChunk, 256),
         256, 0, stream, x, up, x_row, reinterpret_cast<const int4*>(tiles), tile_count, cols, limit, pair_scale,
         staged);
}

// The block's shape for a tile of P pairs (measured on the H200, docs/BENCHMARKS.md): three
// warpgroups (12 warps an SM, one block: the scheduler has more warps to issue from while one
// waits on its MMA), and for P = 16 two scratch accumulators, so a warpgroup adds one step's
// products while the next step runs; at P = 32 two scratches and three warpgroups spill, and one
// scratch (each step's adds after its own MMA) measured faster than two warpgroups with two.
template <int P>
constexpr int kWarpgroupsFor = 3;
template <int P>
constexpr int kScratchesFor = P == 16 ? 2 : 1;

template <int P>
void multiply(const uint32_t* staged, const int32_t* tiles, const int32_t* tile_count, int64_t tile_bound,
              ExpertPass pass, int matrices, int64_t cols, int max_e8m0, cudaStream_t stream) {
  constexpr int kWarpgroups = kWarpgroupsFor<P>, kDepth = kScratchesFor<P>;
  constexpr int64_t kRowsPerBlock = int64_t{kWarpgroups} * 4 * kRowsPerWarp;
  if (tile_bound > kMaxGridY) fail("cuda::expert_wgmma: ", tile_bound, " tiles is past the grid's limit");
  pass.row_blocks = (pass.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const auto kernel = max_e8m0 <= kMaxFoldedE2m1Scale ? expert_kernel<P, kWarpgroups, kDepth, true>()
                                                      : expert_kernel<P, kWarpgroups, kDepth, false>();
  launch(kernel, dim3(static_cast<unsigned>(pass.row_blocks * matrices), static_cast<unsigned>(tile_bound)),
         kWarpgroups * 4 * kWarp, PairTile<P>::kSharedBytes, stream, staged, reinterpret_cast<const int4*>(tiles),
         tile_count, pass, cols);
}

}  // namespace

int expert_wgmma_tile_pairs(int64_t pairs, int64_t experts) {
  if (pairs <= 0 || experts <= 0 || !sm90::device_is_hopper()) return 0;
  const int forced = forced_tile_pairs();
  // Measured against expert_mma's tiles on the H200 (docs/BENCHMARKS.md, "The routed experts of a
  // prefill on wgmma").
  const int tile_pairs = forced >= 0 ? (pairs >= 2 * experts ? forced : 0)
                                     : pairs >= 16 * experts ? 32 : pairs >= 8 * experts ? 16 : 0;
  // The grid holds a tile a row of blocks (expert_mma's kernels stride past that).
  return tile_pairs > 0 && expert_tile_bound(pairs, experts, tile_pairs) <= kMaxGridY ? tile_pairs : 0;
}

int64_t expert_wgmma_staged_words(int64_t tile_bound, int64_t cols, int tile_pairs) {
  check_tile_pairs("cuda::expert_wgmma_staged_words", tile_pairs);
  const int64_t stage_words = tile_pairs == 16 ? PairTile<16>::kStageWords : PairTile<32>::kStageWords;
  return tile_bound * (cols / kChunkColumns) * stage_words;
}

void expert_gate_up_wgmma(const float* x, const int32_t* x_row, const int32_t* tiles, const int32_t* tile_count,
                          int64_t tile_bound, const WeightMatrix* w1, const WeightMatrix* w3, int64_t inner,
                          int64_t cols, uint32_t* staged, float* gate, float* up, Stream stream, int max_e8m0,
                          int tile_pairs) {
  if (launches_skipped()) return;
  check_tile_pairs("cuda::expert_gate_up_wgmma", tile_pairs);
  check_shape("cuda::expert_gate_up_wgmma", inner, cols, tile_bound);
  if (tile_bound == 0 || inner == 0 || cols == 0) return;
  const ExpertPass pass{{w1, w3}, {gate, up}, inner, 0};
  if (tile_pairs == 16) {
    stage<16>(x, nullptr, x_row, tiles, tile_count, tile_bound, cols, 0.0f, nullptr, staged, native(stream));
    multiply<16>(staged, tiles, tile_count, tile_bound, pass, 2, cols, max_e8m0, native(stream));
  } else {
    stage<32>(x, nullptr, x_row, tiles, tile_count, tile_bound, cols, 0.0f, nullptr, staged, native(stream));
    multiply<32>(staged, tiles, tile_count, tile_bound, pass, 2, cols, max_e8m0, native(stream));
  }
  check_launch("cuda::expert_gate_up_wgmma");
}

void expert_down_wgmma(const float* gate, const float* up, float limit, const float* pair_scale, const int32_t* tiles,
                       const int32_t* tile_count, int64_t tile_bound, const WeightMatrix* w2, int64_t rows,
                       int64_t inner, uint32_t* staged, float* y, Stream stream, int max_e8m0, int tile_pairs) {
  if (launches_skipped()) return;
  check_tile_pairs("cuda::expert_down_wgmma", tile_pairs);
  check_shape("cuda::expert_down_wgmma", rows, inner, tile_bound);
  if (tile_bound == 0 || rows == 0 || inner == 0) return;
  const ExpertPass pass{{w2, w2}, {y, y}, rows, 0};
  if (tile_pairs == 16) {
    stage<16>(gate, up, nullptr, tiles, tile_count, tile_bound, inner, limit, pair_scale, staged, native(stream));
    multiply<16>(staged, tiles, tile_count, tile_bound, pass, 1, inner, max_e8m0, native(stream));
  } else {
    stage<32>(gate, up, nullptr, tiles, tile_count, tile_bound, inner, limit, pair_scale, staged, native(stream));
    multiply<32>(staged, tiles, tile_count, tile_bound, pass, 1, inner, max_e8m0, native(stream));
  }
  check_launch("cuda::expert_down_wgmma");
}

}  // namespace deepinfer::kernels::cuda

#pragma once
// What the two dense tensor-core linears share on the host (linear_mma.cu; sm90/linear_wgmma.cu,
// which runs calls of many tokens on Hopper): the weight's column ranges and a grouped call's
// view. The ranges follow the weight's shape alone, never the token count, and both kernels sum a
// range in the same order, so a token's bits are the same whichever kernel its call runs on.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/kernels.h"

namespace deepinfer::kernels::cuda::dense {

constexpr int64_t kRowsPerBlock = 128;  // linear_mma: 4 warps x 32 rows; linear_wgmma: 2 warpgroups x 64
constexpr int64_t kChunkColumns = 128;
constexpr int64_t kTargetBlocks = 264;  // 2 per SM of an H200
constexpr int64_t kMinRangeChunks = 2;
constexpr int64_t kMaxRanges = 32;

// Column ranges: enough blocks for the SMs when a matrix has few rows (wq_a's 1280 rows are 10
// blocks), each range's partial sums added in range order after.
struct ColumnRanges {
  int64_t row_blocks = 0, chunks = 0, count = 1, chunks_each = 0;
};

inline ColumnRanges column_ranges(const WeightMatrix& w) {
  ColumnRanges p;
  p.row_blocks = (w.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  p.chunks = w.cols / kChunkColumns;
  if (p.row_blocks < kTargetBlocks)
    p.count = std::clamp<int64_t>(std::min((kTargetBlocks + p.row_blocks - 1) / p.row_blocks,
                                           p.chunks / kMinRangeChunks),
                                  1, kMaxRanges);
  p.chunks_each = (p.chunks + p.count - 1) / p.count;
  p.count = (p.chunks + p.chunks_each - 1) / p.chunks_each;  // no empty range
  return p;
}

// A grouped projection's view of one call (linear_mma_grouped): `w` covers every group's rows
// (group g's are rows [g * group_rows, (g + 1) * group_rows)), each group's codes and scales are
// in its own descriptor (group_weights, device memory), and group g reads columns [g * w.cols,
// (g + 1) * w.cols) of the split rows, whose planes are x_columns wide. Not grouped: group_weights
// null, group_rows = w.rows, x_columns = w.cols.
struct Groups {
  const WeightMatrix* group_weights;
  int64_t group_rows;
  int64_t x_columns;
};

// ---- sm90/linear_wgmma.cu ----

// The wgmma kernel runs this call: a Hopper device, enough tokens for it to beat linear_mma (8, or 2
// on matrices of few rows; DEEPINFER_CUDA_WGMMA_MIN_TOKENS overrides), and a grouped call's groups
// whole blocks of rows.
bool linear_wgmma_runs(int64_t tokens, const WeightMatrix& w, const Groups& grouping);
// Its split input's words (tokens padded to 64, room for any of its block sizes), the most its
// calls of `tokens` tokens over x_columns columns need.
int64_t linear_wgmma_split_words(int64_t tokens, int64_t x_columns);
// x split into x_split, then each range's sums into out (rows out_stride floats apart; range z's
// at out + z * tokens * w.rows when ranges.count > 1, which the caller adds).
void linear_wgmma(const float* x, int64_t x_stride, int64_t tokens, const WeightMatrix& w, const Groups& grouping,
                  const ColumnRanges& ranges, float* out, int64_t out_stride, uint32_t* x_split, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda::dense

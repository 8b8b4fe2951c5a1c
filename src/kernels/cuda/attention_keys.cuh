#pragma once
// Where a call row's attention keys are (model/attention.cpp attention_core's order: window
// positions oldest..p, then the compressed entries ascending), shared by the sink attention's two
// kernels (sink_attention.cu, sink_attention_mma.cu).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention_kernels.h"

namespace deepinfer::kernels::cuda::detail {

// Where row t's keys are. Window key j < window_keys is position oldest + j; the rest are the
// compressed entries in the order attention_core lists them. 32-bit: rows and positions are
// below 2^31 (the launchers check rows; positions are int32 in SegmentRows), which keeps the
// tensor-core kernel's registers for its MMAs.
struct RowKeys {
  int32_t t = 0;
  int32_t position = 0;
  int32_t oldest = 0;
  int32_t window_keys = 0;
  int32_t entry_keys = 0;
  SegmentRows segment;
};

__device__ __forceinline__ RowKeys row_keys(const AttentionParams& params, const SegmentRows* segments, const int32_t* row_segment,
                            int64_t t) {
  RowKeys keys;
  keys.t = static_cast<int32_t>(t);
  if (row_segment[t] < 0) return keys;  // a padding row: no keys, attended 0
  keys.segment = segments[row_segment[t]];
  keys.position = keys.segment.first_position + (keys.t - keys.segment.row_begin);
  // The store starts no later than the window, except after a window replay restarted it.
  int32_t oldest = keys.position - params.window + 1;
  if (oldest < keys.segment.window_first) oldest = keys.segment.window_first;
  if (oldest < 0) oldest = 0;
  keys.oldest = oldest;
  keys.window_keys = keys.position >= oldest ? keys.position - oldest + 1 : 0;
  if (params.compressed == CompressedKeys::Visible) keys.entry_keys = (keys.position + 1) / params.ratio;
  else if (params.compressed == CompressedKeys::Picked) keys.entry_keys = params.pick_count[t];
  return keys;
}

// model/paged_rows.cpp's row_address.
__device__ __forceinline__ const uint8_t* entry_row(const PagedRegion& region, std::byte* const* blocks, int64_t w) {
  const int64_t block = ((w + 1) * region.ratio - 1) / region.block_tokens;
  const int64_t slot = w - block * region.block_tokens / region.ratio;
  return reinterpret_cast<const uint8_t*>(blocks[block] + region.offset + slot * region.row_bytes);
}

__device__ __forceinline__ const uint8_t* key_row(const AttentionParams& params, const RowKeys& keys, int64_t j) {
  if (j < keys.window_keys) {
    const int32_t position = keys.oldest + static_cast<int32_t>(j);
    const SegmentRows& segment = keys.segment;
    if (position >= segment.first_position) {
      const int64_t call_row = segment.row_begin + (position - segment.first_position);
      return reinterpret_cast<const uint8_t*>(params.call_rows + call_row * params.window_row_bytes);
    }
    return reinterpret_cast<const uint8_t*>(segment.window_ring +
                                            int64_t{position % params.window_capacity} * params.window_row_bytes);
  }
  const int64_t i = j - keys.window_keys;
  const int64_t w = params.compressed == CompressedKeys::Picked ? params.picks[int64_t{keys.t} * params.pick_stride + i] : i;
  return entry_row(params.entries, keys.segment.blocks, w);
}

}  // namespace deepinfer::kernels::cuda::detail

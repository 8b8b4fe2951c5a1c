// sink_attention on the tensor cores: the same sink softmax as sink_attention.cu's SIMT kernel
// (model/attention.cpp attend_head over attention_core's keys), with every key read once for
// 16 heads instead of once per head.
//
// Layout. One thread block per (call row, 16 heads, key split): the 16 heads are one m16n8k16
// MMA's M, so S = Q K^T and O = P V are MMAs over the block's keys, 32 at a time. The head
// dimension is cut into 8 slices, one per warp, and a warp owns everything of its slice:
//   0. it copies its slice of the tile after next's stored rows (codes and the words of scales
//      over them; lane l key l, so no lane needs another's row address) into its own shared
//      memory with cp.async, so the loads' latency hides behind two tiles of MMAs; then lane l
//      decodes key l's staged codes to BF16 (exact: FP8 and FP4 codes under power-of-two or e4m3
//      scales have at most 6 significant bits; e4m3 through the hardware's e4m3x2 -> f16x2
//      conversion) in the warp's own shared memory, with no block barrier. Each format's
//      decode is its own code path with its block size a constant: the decode's integer
//      arithmetic was the kernel's busiest pipe;
//   1. its S is over its slice (a partial dot product per (head, key)), written to shared memory;
//   2. 256 threads, one per (head, key pair), sum the 8 partials in slice order, keep the online
//      softmax (running max from the sink logit, as the SIMT kernel) and write the weights P;
//   3. it rescales its accumulators and adds P V for its slice of the output dimensions.
// Two block barriers a tile (before 2 and before 3); no warp computes S twice, and a warp's
// accumulators are 16 heads x 64 dimensions (32 registers a lane) however wide the head.
//
// Key ranges. Where a call's (row, 16 heads) blocks would leave SMs idle (a few decode rows) and
// the caller gives a workspace, each row's keys are cut into up to kMaxSplits ranges, one block
// each; a block writes its range's unnormalised output, running max (from the sink logit) and
// weight sum, and sink_attention_combine_kernel folds the row's ranges in order (fold_ranges)
// and divides by the whole denominator. The ranges' size follows the call (at least
// kMinSplitKeys, each row's keys cut evenly, no more ranges than the longest row can fill:
// AttentionParams::max_row_keys), so a row's bits do too; a row whose keys fit one range keeps
// the unsplit bits. Under --batch-invariant the ranges are AttentionParams::range_keys keys in
// every call: a call that runs them on blocks of their own folds them in the second pass, any
// other call's block walks its row's ranges and folds each into the output as it ends, with the
// same operations in the same order, so a row's bits follow its own keys alone.
//
// Numerics (mma_common.cuh): q and the weights P are f32, split into three BF16 terms (24 bits);
// the keys are exact in BF16; every MMA sums its 16 exact products from zero and an f32 add
// takes them into the accumulator. So S and O are f32 sums in another order than the SIMT
// kernel's, as two f32 orders differ.
//
// Shared memory per block: per warp its decoded keys (32 x (slice + 8) BF16; the 8 spread an
// ldmatrix's rows over the banks) and two stages of staged codes (32 x slice bytes) and scale
// words (32 x 2 words); then 8 x 16 x 40 partial scores and 16 x 40 weights: 97 KiB at
// head_dim 512, two blocks an SM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/attention_keys.cuh"
#include "kernels/cuda/cache_codes.cuh"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/mma_common.cuh"
#include "kernels/cuda/sink_attention_mma.h"

namespace deepinfer::kernels::cuda::detail {
namespace {

using mma::kPlanes;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kWarp;
constexpr int kHeads = 16;     // one MMA's M
constexpr int kTileKeys = 32;  // keys per pass; a warp's lane l holds key l's row address
constexpr int kMaxHeadDim = 512;
constexpr int kMaxSliceDims = kMaxHeadDim / kWarps;
constexpr int kMaxScoreSteps = kMaxSliceDims / 16;  // S's k steps in a warp's slice
constexpr int kMaxOutputTiles = kMaxSliceDims / 8;  // O's n tiles in a warp's slice
constexpr int kScoreStride = kTileKeys + 8;         // floats per (head) row of scores or weights
constexpr int kKeyPad = 8;                          // BF16 past each decoded key row
constexpr int kChunk = 8;                           // BF16 values a 16-byte store holds
constexpr int kStages = 2;                          // staged tiles: the one decoded, the one in flight
constexpr int kScaleWords = 2;                      // 4-byte words of scales over a slice, at most
constexpr int kMaxSplits = 16;
constexpr int kMinSplitKeys = 2 * kTileKeys;

static_assert(kThreads == kHeads * kTileKeys / 2, "step 2 takes two keys of one head per thread");
static_assert(kTileKeys == kWarp, "a lane holds one key's row address");
static_assert(kInvariantRangeKeys % kTileKeys == 0 && 32 % kTileKeys == 0,
              "ranges are whole tiles (sink_attention checks AttentionParams::range_keys is a multiple of 32)");

struct SharedLayout {
  int slice = 0;       // dimensions a warp owns
  int key_stride = 0;  // BF16 per decoded key row
  std::size_t keys_bytes = 0;   // a warp's decoded keys
  std::size_t stage_bytes = 0;  // a warp's staged codes and scale words of one tile
  std::size_t warp_bytes = 0;
  std::size_t bytes = 0;
};

__host__ __device__ inline SharedLayout shared_layout(int head_dim) {
  SharedLayout layout;
  layout.slice = head_dim / kWarps;
  layout.key_stride = layout.slice + kKeyPad;
  layout.keys_bytes = static_cast<std::size_t>(kTileKeys) * layout.key_stride * 2;
  layout.stage_bytes = static_cast<std::size_t>(kTileKeys) * (layout.slice + 4 * kScaleWords);
  layout.warp_bytes = layout.keys_bytes + kStages * layout.stage_bytes;
  layout.bytes = kWarps * layout.warp_bytes + static_cast<std::size_t>(kWarps + 1) * kHeads * kScoreStride * sizeof(float);
  return layout;
}

// Where a warp's slice of a row is, for one key format: FP8 (a code byte a value, a scale byte
// a 32-value block) or FP4 (a byte two values, a scale byte a 16- or 32-value block).
struct SliceBytes {
  int code_offset = 0;   // the slice's first code byte
  int code_bytes = 0;    // its code bytes
  int scale_offset = 0;  // the first scale word over the slice, in bytes from the row
  int scale_words = 0;   // 1 or 2
};

template <int Block, int ValuesPerByte>
__device__ __forceinline__ SliceBytes slice_bytes_of(int head_dim, int dim0, int slice) {
  SliceBytes s;
  s.code_offset = dim0 / ValuesPerByte;
  s.code_bytes = slice / ValuesPerByte;
  const int first_scale = dim0 / Block;
  const int last_scale = (dim0 + slice - 1) / Block;
  s.scale_offset = head_dim / ValuesPerByte + 4 * (first_scale / 4);
  s.scale_words = last_scale / 4 - first_scale / 4 + 1;
  return s;
}

__device__ __forceinline__ SliceBytes slice_bytes(RowFormat format, int head_dim, int dim0, int slice) {
  switch (format) {
    case RowFormat::Fp8Ue8m0x32: return slice_bytes_of<32, 1>(head_dim, dim0, slice);
    case RowFormat::Fp4E4m3x16: return slice_bytes_of<16, 2>(head_dim, dim0, slice);
    default: return slice_bytes_of<32, 2>(head_dim, dim0, slice);
  }
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int Bytes>
__device__ __forceinline__ void copy_async(void* shared, const void* global) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(shared_address(shared)), "l"(global), "n"(Bytes)
               : "memory");
}
__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int Pending>
__device__ __forceinline__ void await_copies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row)));
}

// The three BF16 terms of the pair (x, y) as three bf16x2 words (low half: x).
__device__ __forceinline__ void split_pair(float x, float y, uint32_t (&word)[kPlanes]) {
  uint32_t tx[kPlanes];
  uint32_t ty[kPlanes];
  mma::split_value(x, tx);
  mma::split_value(y, ty);
#pragma unroll
  for (int p = 0; p < kPlanes; ++p) word[p] = tx[p] | (ty[p] << 16);
}

__device__ __forceinline__ uint32_t bf16x2_rn(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// Two e4m3 codes (bits 7..0 and 15..8) times `scale`, rounded to BF16: the f16 conversion is
// exact (e4m3's range and 4 significant bits fit f16), so this is decode_value's f32 product
// rounded once, as stored_value's floats are. A NaN code or scale gives a NaN.
__device__ __forceinline__ uint32_t e4m3_pair_scaled(uint32_t codes, float scale) {
  uint32_t halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(static_cast<unsigned short>(codes & 0xffffu)));
  const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&halves));
  return bf16x2_rn(v.x * scale, v.y * scale);
}

// e2m1 code value times 2^-126 by placing its bits under the f32 exponent's low bits (exponent
// 0 lands on an f32 subnormal of the right value); times 2^126 it is the code's value, exactly.
__device__ __forceinline__ float e2m1_shifted(uint32_t nibble) {
  return __uint_as_float(((nibble & 0x7u) << 22) | ((nibble & 0x8u) << 28));
}

// A warp's staged tile, laid out so that lane l's 16-byte pieces of key l are side by side across
// the lanes (cp.async's shared writes and the decode's reads go to distinct banks): byte b of key
// k's codes at codes[(b / 16) x 512 + k x 16 + b % 16], scale word w of key k at scales[w x 32 + k].
struct Stage {
  uint8_t* codes;
  uint32_t* scales;
};

__device__ __forceinline__ Stage stage_at(unsigned char* warp_base, const SharedLayout& layout, int stage) {
  uint8_t* base = warp_base + layout.keys_bytes + static_cast<std::size_t>(stage) * layout.stage_bytes;
  return {base, reinterpret_cast<uint32_t*>(base + static_cast<std::size_t>(kTileKeys) * layout.slice)};
}

__device__ __forceinline__ int staged_code(int key, int byte) { return (byte / 16) * (16 * kTileKeys) + key * 16 + byte % 16; }

// A warp's slice of a row for key format `format` (a tile's keys: params' window or entry format).
struct WarpSlice {
  int head_dim;
  int dim0;
  int slice;
  __device__ __forceinline__ SliceBytes of(RowFormat format) const { return slice_bytes(format, head_dim, dim0, slice); }
};

template <int Unit>
__device__ __forceinline__ void copy_codes(uint8_t* codes, int key, const uint8_t* from, int bytes) {
  for (int b = 0; b < bytes; b += Unit) {
    if constexpr (Unit == 1) {
      codes[staged_code(key, b)] = from[b];
    } else {
      copy_async<Unit>(codes + staged_code(key, b), from + b);
    }
  }
}

// Starts the copy of a tile's slice into `stage`: lane l copies key l's codes (its row address
// `row`, null past the tile) and the scale words over them. Each lane's copy is one line of its
// row, so the lanes need no addresses of each other's; rows aligned to 16 bytes (as the caches
// store V4.1-Flash's) copy 16 bytes at a time, others less, down to plain byte loads.
__device__ __forceinline__ void stage_tile(const Stage& stage, const WarpSlice& ws, const uint8_t* row, bool entry,
                                           RowFormat window, RowFormat entries, int lane) {
  if (row == nullptr) return;
  const SliceBytes s = ws.of(entry ? entries : window);
  const uint8_t* from = row + s.code_offset;
  const auto misaligned = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(from) | s.code_bytes) & 15u;
  if (misaligned == 0) {
    copy_codes<16>(stage.codes, lane, from, s.code_bytes);
  } else if ((misaligned & 7u) == 0) {
    copy_codes<8>(stage.codes, lane, from, s.code_bytes);
  } else if ((misaligned & 3u) == 0) {
    copy_codes<4>(stage.codes, lane, from, s.code_bytes);
  } else {
    copy_codes<1>(stage.codes, lane, from, s.code_bytes);
  }
  // The scales start code_bytes(head_dim) (a multiple of 64) into the row.
  for (int w = 0; w < s.scale_words; ++w) {
    const uint8_t* at = row + s.scale_offset + 4 * w;
    uint32_t* to = stage.scales + w * kTileKeys + lane;
    if ((reinterpret_cast<uintptr_t>(row) & 3u) == 0) copy_async<4>(to, at);
    else *to = load_u32_bytes(at);
  }
}

// Code bytes [byte, byte + 4 N) of a staged key (N words), decoded to BF16 values of the slice
// into `out` (the key's decoded row): e4m3 codes through the hardware's exact e4m3x2 -> f16x2
// conversion, e2m1 codes placed under the f32 exponent; either times its block's scale in f32 and
// rounded once to BF16, as stored_value's floats rounded to BF16. A NaN code or scale gives a NaN.
// `scales`: the slice's scale bytes (little-endian), the first at byte `skip`.
template <int Block, int ValuesPerByte, int N>
__device__ __forceinline__ void decode_words(const uint32_t (&code)[N], int byte, int dim0, uint64_t scales, int skip,
                                             uint16_t* out) {
  constexpr int kValues = 4 * N * ValuesPerByte;
  static_assert(kValues <= Block, "a piece lies in one scale block");
  const int first = byte * ValuesPerByte;  // the piece's first value in the slice
  const auto scale_byte =
      static_cast<uint32_t>(scales >> (8 * (skip + (dim0 + first) / Block - dim0 / Block))) & 0xffu;
  uint32_t pairs[kValues / 2];
  if constexpr (ValuesPerByte == 1) {
    const float scale = e8m0_value(scale_byte);
#pragma unroll
    for (int i = 0; i < kValues / 2; ++i) pairs[i] = e4m3_pair_scaled(code[i / 2] >> (16 * (i % 2)), scale);
  } else {
    const bool nan_scale = Block == 16 ? (scale_byte & 0x7fu) == 0x7fu : scale_byte == 255u;
    const float scale = nan_scale ? quiet_nan() : Block == 16 ? e4m3_value(scale_byte) : e8m0_value(scale_byte);
#pragma unroll
    for (int i = 0; i < kValues / 2; ++i) {
      const uint32_t nibbles = code[i / 4] >> (8 * (i % 4));
      const float low = nan_scale ? scale : e2m1_shifted(nibbles) * 0x1p126f * scale;
      const float high = nan_scale ? scale : e2m1_shifted(nibbles >> 4) * 0x1p126f * scale;
      pairs[i] = bf16x2_rn(low, high);
    }
  }
#pragma unroll
  for (int i = 0; i < kValues / 8; ++i)
    *reinterpret_cast<uint4*>(out + first + 8 * i) =
        make_uint4(pairs[4 * i], pairs[4 * i + 1], pairs[4 * i + 2], pairs[4 * i + 3]);
}

// Lane l's key of a staged tile into its decoded row, 16 code bytes at a time (the kernel writes
// zeros for a key past the tile).
template <int Block, int ValuesPerByte>
__device__ __forceinline__ void decode_key(const Stage& stage, const SliceBytes& s, int dim0, int lane, uint16_t* out) {
  const uint64_t scales = stage.scales[lane] | (s.scale_words > 1 ? uint64_t{stage.scales[kTileKeys + lane]} << 32 : 0);
  const int skip = (dim0 / Block) % 4;
  int byte = 0;
  for (; byte + 16 <= s.code_bytes; byte += 16) {
    const uint4 c = *reinterpret_cast<const uint4*>(stage.codes + staged_code(lane, byte));
    const uint32_t code[4] = {c.x, c.y, c.z, c.w};
    if constexpr (ValuesPerByte == 1) {
      decode_words<Block, ValuesPerByte, 4>(code, byte, dim0, scales, skip, out);
    } else {  // 32 FP4 values: two pieces of 16, each in one block (a slice starts on 16 values)
      const uint32_t low[2] = {c.x, c.y};
      const uint32_t high[2] = {c.z, c.w};
      decode_words<Block, ValuesPerByte, 2>(low, byte, dim0, scales, skip, out);
      decode_words<Block, ValuesPerByte, 2>(high, byte + 8, dim0, scales, skip, out);
    }
  }
  if (byte < s.code_bytes) {  // an 8-byte tail: FP4 slices of 16 or 48 values
    const uint2 c = *reinterpret_cast<const uint2*>(stage.codes + staged_code(lane, byte));
    const uint32_t code[2] = {c.x, c.y};
    decode_words<Block, ValuesPerByte, 2>(code, byte, dim0, scales, skip, out);
  }
}

// Row t's keys [begin, end) for this block.
struct KeyRange {
  int32_t begin = 0;
  int32_t end = 0;
};

// The keys of a range of a row of key_count keys: range_keys where fixed (--batch-invariant),
// else the row's keys cut evenly over a call's `splits` blocks (whole tiles, at least
// kMinSplitKeys), or all of them in one.
__device__ __forceinline__ int32_t keys_a_range(int32_t key_count, int splits, int32_t range_keys) {
  if (range_keys > 0) return range_keys;
  if (splits == 1) return key_count > 0 ? key_count : 1;
  int32_t per = (key_count + splits - 1) / splits;
  per = (per + kTileKeys - 1) / kTileKeys * kTileKeys;
  return per < kMinSplitKeys ? kMinSplitKeys : per;
}

// A row's ranges (one, empty, for a row of no keys).
__device__ __forceinline__ int32_t ranges_of(int32_t key_count, int32_t per) {
  return key_count > 0 ? (key_count + per - 1) / per : 1;
}

// One step of the ordered fold of ranges: x a + y b, rounded as written (no contraction), so the
// block that walks its ranges and the pass that combines split ones give the same bits.
__device__ __forceinline__ float fold_ranges(float x, float a, float y, float b) {
  return __fadd_rn(__fmul_rn(x, a), __fmul_rn(y, b));
}

// Lane l's row address for key (first + l) of [.., end): null past the end.
__device__ __forceinline__ const uint8_t* lane_row(const AttentionParams& params, const RowKeys& keys, int32_t first,
                                                   int32_t end, int lane) {
  const int32_t j = first + lane;
  return j < end ? key_row(params, keys, j) : nullptr;
}

// Walk: the block may walk several fixed ranges of its row (a call of fixed ranges that does not
// split them over blocks); its own instance, so that the fold's registers cost no other call.
template <bool Walk>
__global__ void __launch_bounds__(kThreads, 2)
    sink_attention_mma_kernel(const __grid_constant__ AttentionParams params, const SegmentRows* segments,
                              const int32_t* row_segment, const float* q, float* attended, float* split_parts) {
  await_previous_grid();
  extern __shared__ __align__(16) unsigned char shared[];
  __shared__ float rescale[kHeads];
  __shared__ float denominator[kHeads];
  __shared__ float fold_old[kHeads];  // a walked range's fold: the total's factor and the range's
  __shared__ float fold_new[kHeads];
  __shared__ float total_max[kHeads];  // a walking block's ranges folded so far (shared: registers
  __shared__ float total_sum[kHeads];  // are the kernel's limit)
  const int head_dim = params.head_dim;
  const SharedLayout layout = shared_layout(head_dim);
  const int64_t t = blockIdx.x;
  const int head0 = static_cast<int>(blockIdx.y) * kHeads;
  const int split = static_cast<int>(blockIdx.z);
  const int splits = static_cast<int>(gridDim.z);
  const int thread = static_cast<int>(threadIdx.x);
  const int warp = thread / kWarp;
  const int lane = thread % kWarp;
  const int g = lane / 4;  // the MMA fragments' row group
  const int c = lane % 4;  // and column pair
  const int slice = layout.slice;
  const int dim0 = warp * slice;
  const int score_steps = slice / 16;
  const int output_tiles = slice / 8;
  unsigned char* warp_base = shared + static_cast<std::size_t>(warp) * layout.warp_bytes;
  auto* keys_bf16 = reinterpret_cast<uint16_t*>(warp_base);
  auto* partial = reinterpret_cast<float*>(shared + kWarps * layout.warp_bytes);  // [kWarps][kHeads][kScoreStride]
  float* weights = partial + kWarps * kHeads * kScoreStride;                       // [kHeads][kScoreStride]

  const RowKeys keys = row_keys(params, segments, row_segment, t);
  const int32_t key_count = keys.window_keys + keys.entry_keys;
  const int32_t per = keys_a_range(key_count, splits, params.range_keys);
  KeyRange range{0, key_count};
  if (splits > 1) {
    range.begin = split * per;
    if (split > 0 && range.begin >= key_count) return;  // the row has fewer ranges
    range.end = key_count - range.begin > per ? range.begin + per : key_count;
  }
  // One block for a row of several fixed ranges (--batch-invariant): each is folded into the
  // output rows as it ends, as the combining pass folds split ones.
  const bool walk_ranges = Walk && splits == 1 && key_count > per;
  int32_t walked_range_end = per;  // the key that ends the range a walking block is in
  const WarpSlice ws{head_dim, dim0, slice};
  // Keys past the window's are entries (none without compressed keys, where the entry format
  // is unused).
  const RowFormat window_format = params.window_format;
  const RowFormat entry_format = params.entries.format;

  // The first two tiles' copies start before anything else: their latency hides behind q's split.
  const uint8_t* row_ahead = nullptr;  // lane's key in the tile after the one in flight
  {
    const uint8_t* row0 = lane_row(params, keys, range.begin, range.end, lane);
    stage_tile(stage_at(warp_base, layout, 0), ws, row0, range.begin + lane >= keys.window_keys, window_format,
               entry_format, lane);
    commit_copies();
    const int32_t first1 = range.begin + kTileKeys;
    const uint8_t* row1 = lane_row(params, keys, first1, range.end, lane);
    stage_tile(stage_at(warp_base, layout, 1), ws, row1, first1 + lane >= keys.window_keys, window_format,
               entry_format, lane);
    commit_copies();
    row_ahead = lane_row(params, keys, range.begin + 2 * kTileKeys, range.end, lane);
  }

  // q's A fragments for this warp's slice: rows g and g + 8 (heads), columns 2c, 2c + 1 and 8
  // past them (dimensions), in three planes.
  uint32_t qa[kMaxScoreSteps][kPlanes][4];
#pragma unroll
  for (int step = 0; step < kMaxScoreSteps; ++step) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int head = head0 + g + (r % 2) * 8;
      const int dim = dim0 + 16 * step + 2 * c + (r / 2) * 8;
      float x = 0.0f;
      float y = 0.0f;
      if (step < score_steps && head < params.heads) {
        const float* at = q + (t * params.heads + head) * head_dim + dim;
        x = at[0];
        y = at[1];
      }
      uint32_t word[kPlanes];
      split_pair(x, y, word);
#pragma unroll
      for (int p = 0; p < kPlanes; ++p) qa[step][p][r] = word[p];
    }
  }

  // Step 2's thread: head (thread / 16), keys (thread % 16) and 16 past it.
  const int softmax_head = thread / 16;
  const int softmax_key = thread % 16;
  const float sink = head0 + softmax_head < params.heads ? params.sink[head0 + softmax_head] : 0.0f;
  float running_max = sink;
  float weight_sum = 0.0f;

  float acc[kMaxOutputTiles][4];
#pragma unroll
  for (int n = 0; n < kMaxOutputTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[n][i] = 0.0f;

  int stage_index = 0;
  for (int32_t tile_first = range.begin; tile_first < range.end; tile_first += kTileKeys) {
    const int32_t remaining = range.end - tile_first;
    const int tile_size = static_cast<int>(remaining < kTileKeys ? remaining : kTileKeys);

    // 0. This tile's copies (all but the newest group are complete), decoded into the warp's keys;
    // keys past the tile's end are zeros (their weight is 0, and 0 x NaN would not be).
    await_copies<1>();
    __syncwarp();
    const Stage stage = stage_at(warp_base, layout, stage_index);
    {
      uint16_t* key_out = keys_bf16 + lane * layout.key_stride;
      if (lane < tile_size) {
        const RowFormat format = tile_first + lane >= keys.window_keys ? entry_format : window_format;
        const SliceBytes s = ws.of(format);
        if (format == RowFormat::Fp8Ue8m0x32) decode_key<32, 1>(stage, s, dim0, lane, key_out);
        else if (format == RowFormat::Fp4E4m3x16) decode_key<16, 2>(stage, s, dim0, lane, key_out);
        else decode_key<32, 2>(stage, s, dim0, lane, key_out);
      } else {
        for (int first = 0; first < slice; first += kChunk)
          *reinterpret_cast<uint4*>(key_out + first) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    __syncwarp();
    // The stage is free: the tile two ahead goes into it.
    {
      const int32_t ahead_first = tile_first + 2 * kTileKeys;
      stage_tile(stage, ws, row_ahead, ahead_first + lane >= keys.window_keys, window_format, entry_format, lane);
      commit_copies();
      row_ahead = lane_row(params, keys, ahead_first + kTileKeys, range.end, lane);
      stage_index ^= 1;
    }

    // 1. Partial scores over this warp's slice: n tile j is keys 8 j .. 8 j + 7.
    const int key_tiles = (tile_size + 7) / 8;
    for (int j = 0; j < key_tiles; ++j) {
      float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      // ldmatrix rows: lane l gives key 8 j + l % 8 at dimension 8 (l / 8) of a 32-wide span,
      // so the four matrices are two k steps' (b0, b1).
      const uint16_t* key_at = keys_bf16 + (8 * j + lane % 8) * layout.key_stride + 8 * (lane / 8);
#pragma unroll
      for (int step = 0; step < kMaxScoreSteps; step += 2) {
        if (step >= score_steps) break;
        if (step + 1 < score_steps) {
          uint32_t b[4];
          ldmatrix_x4(b, key_at + 16 * step);
#pragma unroll
          for (int p = 0; p < kPlanes; ++p) {
            mma::mma_bf16_add(s, qa[step][p][0], qa[step][p][1], qa[step][p][2], qa[step][p][3], b[0], b[1]);
            mma::mma_bf16_add(s, qa[step + 1][p][0], qa[step + 1][p][1], qa[step + 1][p][2], qa[step + 1][p][3],
                              b[2], b[3]);
          }
        } else {
          uint32_t b[2];
          ldmatrix_x2(b, key_at + 16 * step);  // lanes 0..15's rows: the k step's two matrices
#pragma unroll
          for (int p = 0; p < kPlanes; ++p)
            mma::mma_bf16_add(s, qa[step][p][0], qa[step][p][1], qa[step][p][2], qa[step][p][3], b[0], b[1]);
        }
      }
      float* out = partial + (warp * kHeads + g) * kScoreStride + 8 * j + 2 * c;
      *reinterpret_cast<float2*>(out) = make_float2(s[0], s[1]);
      *reinterpret_cast<float2*>(out + 8 * kScoreStride) = make_float2(s[2], s[3]);
    }
    __syncthreads();

    // 2. Scores, the online softmax and the weights.
    float score[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int key = softmax_key + 16 * i;
      float dot = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) dot += partial[(w * kHeads + softmax_head) * kScoreStride + key];
      score[i] = key < tile_size ? dot * params.scale : -INFINITY;
    }
    float tile_max = fmaxf(score[0], score[1]);
#pragma unroll
    for (int offset = 8; offset > 0; offset >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, offset));
    const float new_max = fmaxf(running_max, tile_max);
    const float weight0 = expf(score[0] - new_max);
    const float weight1 = expf(score[1] - new_max);
    float tile_sum = weight0 + weight1;
#pragma unroll
    for (int offset = 8; offset > 0; offset >>= 1) tile_sum += __shfl_xor_sync(kFullMask, tile_sum, offset);
    const float scale_old = expf(running_max - new_max);
    weight_sum = weight_sum * scale_old + tile_sum;
    running_max = new_max;
    weights[softmax_head * kScoreStride + softmax_key] = weight0;
    weights[softmax_head * kScoreStride + softmax_key + 16] = weight1;
    if (softmax_key == 0) rescale[softmax_head] = scale_old;
    // A walking block's range ends with this tile: its max and sum folded into the totals, the
    // next range's softmax starting afresh from the sink logit (as a block of its own would).
    const bool last_tile = tile_first + kTileKeys >= range.end;
    const bool range_ends = walk_ranges && (last_tile || tile_first + kTileKeys == walked_range_end);
    const bool first_range = walked_range_end == per;  // never the last: a walking row has several
    if (range_ends) {
      if (softmax_key == 0) {
        if (first_range) {
          total_max[softmax_head] = running_max;
          total_sum[softmax_head] = weight_sum;
        } else {
          const float old_max = total_max[softmax_head];
          const float new_total = fmaxf(old_max, running_max);
          const float old_factor = expf(old_max - new_total);
          const float new_factor = expf(running_max - new_total);
          total_sum[softmax_head] = fold_ranges(total_sum[softmax_head], old_factor, weight_sum, new_factor);
          total_max[softmax_head] = new_total;
          fold_old[softmax_head] = old_factor;
          fold_new[softmax_head] = new_factor;
          if (last_tile) denominator[softmax_head] = total_sum[softmax_head] + expf(sink - new_total);
        }
      }
      running_max = sink;
      weight_sum = 0.0f;
    }
    __syncthreads();

    // 3. O = O * rescale + P V over this warp's output slice: k step u is keys 16 u .. 16 u + 15.
    const float rescale_low = rescale[g];
    const float rescale_high = rescale[g + 8];
#pragma unroll
    for (int n = 0; n < kMaxOutputTiles; ++n) {
      acc[n][0] *= rescale_low;
      acc[n][1] *= rescale_low;
      acc[n][2] *= rescale_high;
      acc[n][3] *= rescale_high;
    }
    const int key_steps = (tile_size + 15) / 16;
    for (int u = 0; u < key_steps; ++u) {
      uint32_t pa[4][kPlanes];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float2 w = *reinterpret_cast<const float2*>(weights + (g + (r % 2) * 8) * kScoreStride + 16 * u +
                                                          2 * c + (r / 2) * 8);
        split_pair(w.x, w.y, pa[r]);
      }
      // ldmatrix rows (transposed): lane l gives key 16 u + l % 8 + 8 ((l / 8) % 2) at dimension
      // 8 (l / 16) of a 16-wide span: (b0, b1) of two n tiles.
      const uint16_t* value_at =
          keys_bf16 + (16 * u + lane % 8 + 8 * ((lane / 8) % 2)) * layout.key_stride + 8 * (lane / 16);
#pragma unroll
      for (int n = 0; n < kMaxOutputTiles; n += 2) {
        if (n >= output_tiles) break;
        uint32_t b[4];
        ldmatrix_x4_trans(b, value_at + 8 * n);
#pragma unroll
        for (int p = 0; p < kPlanes; ++p) {
          mma::mma_bf16_add(acc[n], pa[0][p], pa[1][p], pa[2][p], pa[3][p], b[0], b[1]);
          mma::mma_bf16_add(acc[n + 1], pa[0][p], pa[1][p], pa[2][p], pa[3][p], b[2], b[3]);
        }
      }
    }
    if (range_ends) {
      // The range's output folded into the total the output rows hold (a lane its own elements,
      // unnormalised until the last range, which divides by the whole denominator), and the
      // accumulators cleared for the next.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int head = head0 + g + 8 * h;
        if (head >= params.heads) continue;
        const float old_factor = fold_old[g + 8 * h];
        const float new_factor = fold_new[g + 8 * h];
        const float d = last_tile ? denominator[g + 8 * h] : 1.0f;
        float* out = attended + (t * params.heads + head) * head_dim + dim0 + 2 * c;
#pragma unroll
        for (int n = 0; n < kMaxOutputTiles; ++n) {
          if (n >= output_tiles) break;
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float v = acc[n][2 * h + e];
            // (x / 1 is x: the ranges before the last are stored as folded)
            out[8 * n + e] = first_range ? v : fold_ranges(out[8 * n + e], old_factor, v, new_factor) / d;
          }
        }
      }
#pragma unroll
      for (int n = 0; n < kMaxOutputTiles; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[n][i] = 0.0f;
      walked_range_end += per;
    }
    __syncwarp();  // the warp's keys are read before the next tile's decode overwrites them
  }
  await_copies<0>();  // no copy outlives the block

  if (splits > 1) {
    // This range's unnormalised output, running max and weight sum (an empty range: 0, the sink
    // logit, 0), for sink_attention_combine_kernel.
    const int64_t heads = params.heads;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = head0 + g + 8 * h;
      if (head >= params.heads) continue;
      float* out = split_parts + ((t * heads + head) * splits + split) * head_dim + dim0 + 2 * c;
#pragma unroll
      for (int n = 0; n < kMaxOutputTiles; ++n) {
        if (n >= output_tiles) break;
        *reinterpret_cast<float2*>(out + 8 * n) = make_float2(acc[n][2 * h], acc[n][2 * h + 1]);
      }
    }
    if (softmax_key == 0 && head0 + softmax_head < params.heads) {
      float* stats = split_parts + static_cast<int64_t>(gridDim.x) * heads * splits * head_dim +
                     ((t * heads + head0 + softmax_head) * splits + split) * 2;
      stats[0] = running_max;
      stats[1] = weight_sum;
    }
    return;
  }

  if (walk_ranges) return;  // the last range's fold wrote the output

  // No keys: weight_sum 0 and acc 0, so the output is 0 (the sink takes all the mass).
  if (softmax_key == 0) denominator[softmax_head] = weight_sum + expf(sink - running_max);
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int head = head0 + g + 8 * h;
    if (head >= params.heads) continue;
    const float d = denominator[g + 8 * h];
    float* out = attended + (t * params.heads + head) * head_dim + dim0 + 2 * c;
#pragma unroll
    for (int n = 0; n < kMaxOutputTiles; ++n) {
      if (n >= output_tiles) break;
      out[8 * n] = acc[n][2 * h] / d;
      out[8 * n + 1] = acc[n][2 * h + 1] / d;
    }
  }
}

// One block per (row, head): the row's ranges folded in order (the first as it is, then each
// with fold_ranges' factors against the running max, as a walking block folds them) and divided
// by the whole denominator (the folded sums, then the sink's term, as one block sums them).
// Blocks of a row's ranges past its keys wrote nothing and are not read.
constexpr int kCombineThreads = 128;

__global__ void __launch_bounds__(kCombineThreads)
    sink_attention_combine_kernel(const __grid_constant__ AttentionParams params, const SegmentRows* segments,
                                  const int32_t* row_segment, const float* split_parts, int splits,
                                  float* attended) {
  await_previous_grid();
  const int64_t t = blockIdx.x;
  const int head = static_cast<int>(blockIdx.y);
  const int64_t heads = params.heads;
  const int head_dim = params.head_dim;
  const int64_t pair = t * heads + head;
  const RowKeys keys = row_keys(params, segments, row_segment, t);
  const int32_t key_count = keys.window_keys + keys.entry_keys;
  const int ranges = ranges_of(key_count, keys_a_range(key_count, splits, params.range_keys));
  const float* stats = split_parts + static_cast<int64_t>(gridDim.x) * heads * splits * head_dim + pair * splits * 2;
  // Every range's max and sum loaded at once (one load latency, not one a range).
  float range_max[kMaxSplits];
  float range_sum[kMaxSplits];
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s) {
    range_max[s] = s < ranges ? stats[2 * s] : 0.0f;
    range_sum[s] = s < ranges ? stats[2 * s + 1] : 0.0f;
  }
  float old_factor[kMaxSplits];
  float new_factor[kMaxSplits];
  float total_max = range_max[0];
  float d = range_sum[0];
#pragma unroll
  for (int s = 1; s < kMaxSplits; ++s) {
    old_factor[s] = 1.0f;
    new_factor[s] = 0.0f;
    if (s >= ranges) continue;
    const float new_total = fmaxf(total_max, range_max[s]);
    old_factor[s] = expf(total_max - new_total);
    new_factor[s] = expf(range_max[s] - new_total);
    d = fold_ranges(d, old_factor[s], range_sum[s], new_factor[s]);
    total_max = new_total;
  }
  d += expf(params.sink[head] - total_max);
  const float* parts = split_parts + pair * splits * head_dim;
#pragma unroll 2
  for (int e = static_cast<int>(threadIdx.x); e < head_dim; e += kCombineThreads) {
    float part[kMaxSplits];  // every range's value loaded at once (predicated, not one load a range)
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) part[s] = s < ranges ? parts[s * head_dim + e] : 0.0f;
    float sum = part[0];
#pragma unroll
    for (int s = 1; s < kMaxSplits; ++s)
      if (s < ranges) sum = fold_ranges(sum, old_factor[s], part[s], new_factor[s]);
    attended[pair * head_dim + e] = sum / d;
  }
}

// Key splits for a call: where its blocks fill at most one an SM, as many as fill two an SM
// (the kernel's residency), up to kMaxSplits and to one a kMinSplitKeys of the longest row's keys
// where a bound is known. Fixed ranges (range_keys): every range of the longest row, where they
// are at most kMaxSplits (else its blocks walk them: the same bits).
int key_splits(int64_t rows, int32_t heads, int32_t max_row_keys, int32_t range_keys) {
  const int64_t blocks = rows * ((heads + kHeads - 1) / kHeads);
  const int64_t slots = 2 * int64_t{current_device_sm_count()};
  if (blocks <= 0 || 2 * blocks > slots) return 1;
  if (range_keys > 0) {
    const int64_t ranges = max_row_keys > 0 ? (int64_t{max_row_keys} + range_keys - 1) / range_keys : kMaxSplits;
    return ranges <= kMaxSplits ? static_cast<int>(ranges) : 1;
  }
  int64_t splits = slots / blocks < kMaxSplits ? slots / blocks : kMaxSplits;
  if (max_row_keys > 0) {
    const int64_t useful = (int64_t{max_row_keys} + kMinSplitKeys - 1) / kMinSplitKeys;
    if (useful < splits) splits = useful;
  }
  return static_cast<int>(splits);
}

}  // namespace

void sink_attention_mma(const AttentionParams& params, const SegmentRows* segments, const int32_t* row_segment,
                        int64_t rows, const float* q, float* attended, Stream stream) {
  const SharedLayout layout = shared_layout(params.head_dim);
  if (layout.bytes > 48 * 1024) {
    cudaError_t status = cudaFuncSetAttribute(sink_attention_mma_kernel<false>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(layout.bytes));
    if (status == cudaSuccess)
      status = cudaFuncSetAttribute(sink_attention_mma_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(layout.bytes));
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // do not leave the refusal for the next check
      fail("cuda::sink_attention: head_dim ", params.head_dim, " needs ", layout.bytes,
           " bytes of shared memory: ", cudaGetErrorString(status));
    }
  }
  // Fixed ranges on blocks of their own need a bound on every row's ranges: without one the
  // blocks walk them.
  const bool may_split = params.split_workspace != nullptr && (params.range_keys == 0 || params.max_row_keys > 0);
  const int splits = may_split ? key_splits(rows, params.heads, params.max_row_keys, params.range_keys) : 1;
  const auto kernel = params.range_keys > 0 && splits == 1 ? sink_attention_mma_kernel<true>
                                                           : sink_attention_mma_kernel<false>;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((params.heads + kHeads - 1) / kHeads),
                  static_cast<unsigned>(splits));
  launch(kernel, grid, kThreads, layout.bytes, native(stream), params, segments, row_segment, q,
         attended, params.split_workspace);
  check_launch("cuda::sink_attention (tensor cores)");
  if (splits == 1) return;
  launch(sink_attention_combine_kernel, dim3(static_cast<unsigned>(rows), static_cast<unsigned>(params.heads)),
         kCombineThreads, 0, native(stream), params, segments, row_segment,
         static_cast<const float*>(params.split_workspace), splits, attended);
  check_launch("cuda::sink_attention (combining key splits)");
}

}  // namespace deepinfer::kernels::cuda::detail

namespace deepinfer::kernels::cuda {

bool sink_attention_on_tensor_cores(const AttentionParams& params) {
  const auto exact = [&](RowFormat format) { return detail::quantizes(format, params.head_dim); };
  const bool entries_exact = params.compressed == CompressedKeys::None || exact(params.entries.format);
  return params.tensor_cores && params.head_dim > 0 && params.head_dim % 128 == 0 &&
         params.head_dim <= detail::kMaxHeadDim && exact(params.window_format) && entries_exact;
}

int64_t sink_attention_split_floats(int64_t rows, int32_t heads, int32_t head_dim, int32_t max_row_keys,
                                    int32_t range_keys) {
  const int splits = detail::key_splits(rows, heads, max_row_keys, range_keys);
  return splits == 1 ? 0 : rows * heads * splits * (int64_t{head_dim} + 2);
}

}  // namespace deepinfer::kernels::cuda

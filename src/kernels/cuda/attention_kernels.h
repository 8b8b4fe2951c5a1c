#pragma once
// The kernels of attention's stateful middle (docs/ARCHITECTURE.md, "CUDA backend: the cache on
// the device"): K = V rows and compressed entries stored in the cache formats, the compressors'
// pooling, the lightning indexer's scores and top-k (with V4.1's candidate blocks), and the sink
// attention over window + compressed rows. Each mirrors the CPU code named beside it, so the two
// backends agree to rounding (f32 sums in another order) and store byte-identical cache rows for
// the same input values.
//
// Cache rows are stored exactly as model/quantized_rows.h and model/paged_rows.h store them on the
// host: a row of n values in a quantising format (n a multiple of its block) is its codes
// (model/fake_quant.h: FP8 one byte per value; FP4 two values per byte, the even one in the low
// nibble) followed by one scale byte per block; otherwise (F32, or a width that does not block)
// n little-endian floats. So a block or a window row moves between host and device as bytes.
//
// Plain functions over device pointers on the given stream, never synchronising; the structs
// below are passed by value or as device arrays, as each function says.
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"

namespace deepinfer::kernels::cuda {

// model::CacheFormat, in the same order (the backend casts between them).
enum class RowFormat : int32_t { F32 = 0, Fp8Ue8m0x32 = 1, Fp4E4m3x16 = 2, Fp4Ue8m0x32 = 3 };

// Bytes of one stored row of `width` values (as model::QuantizedRows::row_bytes).
int64_t stored_row_bytes(RowFormat format, int64_t width);

// ---- storing rows ----

// rows [count, width] f32 -> stored rows: row r at destinations[r] (a device array of `count`
// device addresses; a null one skips row r), quantised as model::quantize_vector does, bit for
// bit, or copied as f32.
void store_rows(const float* rows, int64_t count, int64_t width, RowFormat format, std::byte* const* destinations,
                Stream stream);

// x <- dequantize(quantize(x)) for each of `count` rows of `width` (model::fake_quantize; a no-op
// when the width does not block).
void fake_quantize_rows(float* x, int64_t count, int64_t width, RowFormat format, Stream stream);

// ---- where a segment's cached rows are ----

// One layer's paged region (model/paged_rows.h): entry w of a layer of ratio r lives in block
// k = ((w + 1) * r - 1) / block_tokens, slot w - k * block_tokens / r, at
// blocks[k] + offset + slot * row_bytes.
struct PagedRegion {
  int64_t block_tokens = 0;
  int64_t ratio = 0;
  int64_t offset = 0;
  int64_t row_bytes = 0;
  int32_t width = 0;
  RowFormat format = RowFormat::F32;
};

// One sequence's rows in a call (model::AttentionSegment) as the kernels see it. Rows
// [row_begin, row_begin + rows) of the call are positions first_position, first_position + 1, ...
struct SegmentRows {
  int32_t row_begin = 0;
  int32_t rows = 0;
  int32_t first_position = 0;
  // The window rows stored before this call: positions [window_first, first_position) at
  // window_ring + (position % window_capacity) * window_row_bytes. The call's own rows are read
  // from the call's stored rows (AttentionParams::call_rows) instead.
  int32_t window_first = 0;
  const std::byte* window_ring = nullptr;
  // The sequence's block table: a device array of device block addresses (null: no paged rows).
  std::byte* const* blocks = nullptr;
};

// A row_segment entry of -1 marks a padding row of a fixed-size launch (a CUDA graph's batch
// bucket, backend/cuda/step_graphs.h): it sees no key and no entry, so index_scores leaves its
// scores, candidate_blocks masks every block off, top_k_entries picks nothing and sink_attention
// writes zeros.

// ---- compressors (model/compressor.cpp, model/latent_compressor.cpp) ----

// One compressor's open rows between calls: a ring of `capacity` rows per segment (kv and gate,
// [capacity, width] f32 each; gate with ape already added), row of position p at slot
// p % capacity. It holds the rows of positions [kept_from, first_position) of each segment.
struct CompressorRing {
  float* kv = nullptr;
  float* gate = nullptr;
};

struct CompressorParams {
  int32_t ratio = 0;
  int32_t head_dim = 0;   // d: one entry's width
  int32_t width = 0;      // d, or 2 d with overlap (the kv / gate row width)
  bool overlap = false;   // V4 CSA: entry w > 0 also pools window w - 1's A half
  const float* ape = nullptr;  // [ratio, width] added to the gate logits by in-window offset; null: none (V4.1)
  int32_t capacity = 0;   // ring rows: 2 * ratio with overlap, else ratio
};

// Pools the entries that close in this call. `entries` (a device array of `count` pairs) names
// them: entry_segment[i] (an index into `segments`, a device array) and entry_index[i] (the
// entry w: window [w * ratio, (w + 1) * ratio)). kv and gate: the call's projected rows
// [call rows, width] (gate without ape). rings: a device array, one per segment. A row of
// position p comes from the call when p >= first_position, else from the segment's ring.
// pooled [count, head_dim]: per channel e, softmax over the slots (previous window's gate[e] then
// this window's gate[overlap ? d + e : e]) weighting the matching kv values, summed in slot order
// (as close_window / compress_latents); no norm, no RoPE. An entry whose entry_segment is negative
// is padding (a launch of fixed capacity, as a captured graph needs): its pooled row is zeros.
void compressor_pool(const CompressorParams& params, const SegmentRows* segments, const CompressorRing* rings,
                     const int32_t* entry_segment, const int32_t* entry_index, int64_t count, const float* kv,
                     const float* gate, float* pooled, Stream stream);

// Writes the call's rows that the rings must keep into the rings: for segment s, the rows of
// positions [max(first_position, keep_from[s]), first_position + rows), gate with ape added.
// keep_from: a device array, one per segment.
void compressor_keep(const CompressorParams& params, const SegmentRows* segments, const CompressorRing* rings,
                     const int32_t* keep_from, int64_t segment_count, const float* kv, const float* gate,
                     Stream stream);

// ---- the lightning indexer (model/indexer.cpp, model/shared_indexer.cpp) ----

struct IndexerParams {
  int32_t heads = 0;
  int32_t head_dim = 0;
  int32_t ratio = 0;
  float score_scale = 0;   // head_dim^-1/2
  float weight_scale = 0;  // heads^-1/2
  PagedRegion keys;        // the index keys (V4: F32 indexer compressor entries; V4.1: FP4 keys)
  int32_t max_visible = 0; // the largest (position + 1) / ratio of the call: the scores' row stride
  // false: the SIMT kernel even where the tensor-core one applies (DEEPINFER_CUDA_SIMT=1).
  bool tensor_cores = true;
};

// Whether index_scores runs on the tensor cores for these parameters: V4.1's FP4 keys (e2m1
// under E8M0 scales per 32) of 32 to 128 values, 16 to 64 heads in sixteens. The queries should
// be fake-quantised the same way (select_entries does): the kernel multiplies their codes as
// integers, and a (head, entry) whose q is not such codes, or whose block scales are too far
// apart for every partial sum to be exact in f32, is summed in model::dot's order instead.
bool index_scores_on_tensor_cores(const IndexerParams& params);

// scores [call rows, max_visible]: for row t of segment s at position p and entry w < (p + 1) / ratio,
// sum over h of relu(q[t, h] . key_w) * score_scale * (head_weights[t, h] * weight_scale), heads in
// ascending order; entries at or past (p + 1) / ratio are left unwritten. q [rows, heads, head_dim]
// (already rotated, and for V4.1 fake-quantised), head_weights [rows, heads]. row_segment: a device
// array mapping each call row to its segment.
void index_scores(const IndexerParams& params, const SegmentRows* segments, const int32_t* row_segment, int64_t rows,
                  const float* q, const float* head_weights, float* scores, Stream stream);

// What a top-k may pick from (V4.1's candidate pre-filter, model/shared_indexer.cpp).
struct CandidateParams {
  int32_t block_size = 0;  // entries per candidate block
  int32_t topk_blocks = 0;
  int32_t max_blocks = 0;  // the candidate masks' row stride: ceil(max_visible / block_size)
};

// The candidate source: for each row with v = (p + 1) / ratio > 0 visible entries, block b's score
// is the largest score of its entries, the newest block (holding entry v - 1) scores +inf, and the
// topk_blocks best blocks (ties to the lower block) get mask 1, the others 0, in
// candidate_mask [rows, max_blocks] (bytes; blocks past ceil(v / block_size) are 0).
void candidate_blocks(const CandidateParams& params, const SegmentRows* segments, const int32_t* row_segment,
                      int64_t rows, int32_t ratio, const float* scores, int32_t max_visible, uint8_t* candidate_mask,
                      Stream stream);

// Each row's top `topk` visible entries by descending score, exact ties to the lower entry, among
// those allowed (candidate_mask null: all visible entries; else only entries of blocks whose mask
// byte is 1), written in ascending order: picks [rows, topk] (int32; slots past the count are -1)
// and pick_count [rows] = min(topk, allowed entries).
void top_k_entries(const SegmentRows* segments, const int32_t* row_segment, int64_t rows, int32_t ratio,
                   const float* scores, int32_t max_visible, const uint8_t* candidate_mask,
                   const CandidateParams& candidates, int32_t topk, int32_t* picks, int32_t* pick_count,
                   Stream stream);

// ---- sink attention (model/attention.cpp attention_core) ----

enum class CompressedKeys : int32_t {
  None = 0,     // window only (ratio-0 layers)
  Visible = 1,  // every entry w < (p + 1) / ratio (V4 HCA)
  Picked = 2,   // the row's picks (V4 CSA, V4.1 CSA2)
};

struct AttentionParams {
  int32_t heads = 0;
  int32_t head_dim = 0;
  int32_t window = 0;           // the sliding window W: position p sees window positions [p - W + 1, p]
  int32_t window_capacity = 0;  // rows of each segment's window ring
  int64_t window_row_bytes = 0;
  RowFormat window_format = RowFormat::F32;
  float scale = 0;              // head_dim^-1/2
  const float* sink = nullptr;  // [heads]
  // The call's own K = V rows, stored in window_format: [call rows] at call_rows + t * window_row_bytes.
  const std::byte* call_rows = nullptr;
  CompressedKeys compressed = CompressedKeys::None;
  int32_t ratio = 0;
  PagedRegion entries;          // the compressed entries (Visible and Picked)
  const int32_t* picks = nullptr;       // Picked: [rows, pick_stride], ascending
  const int32_t* pick_count = nullptr;  // Picked: [rows]
  int32_t pick_stride = 0;
  // false: part 1's SIMT kernel even where the tensor-core one applies (DEEPINFER_CUDA_SIMT=1).
  bool tensor_cores = true;
  // Key ranges (the tensor-core kernel). 0: a call whose blocks would leave SMs idle (a few
  // decode rows) cuts each row's keys into ranges sized by the call, one block each, and folds
  // them in a second pass, in another order of sums than one block's: a row's bits follow the
  // call's size. kInvariantRangeKeys (--batch-invariant): every row's keys are cut into ranges of
  // that many keys in every call, each range's softmax taken alone and the ranges folded in
  // order, so a row's bits follow its own keys; the call's size decides only whether the ranges
  // run on blocks of their own (and are folded by the second pass) or one block walks and folds
  // them, with the same bits.
  int32_t range_keys = 0;
  // Not null: the workspace that lets ranges run on blocks of their own,
  // sink_attention_split_floats(rows, heads, head_dim, max_row_keys, range_keys) floats; null
  // keeps each row in one block.
  float* split_workspace = nullptr;
  // No row of the call has more keys (0: no bound known). It caps the ranges at one a 64 keys,
  // so a call of short rows launches no empty ranges; each row's keys are covered whatever it is.
  int32_t max_row_keys = 0;
};

// The fixed key ranges of --batch-invariant (AttentionParams::range_keys): a multiple of the
// kernel's 32-key tile; V4.1-Flash's 640 keys of a CSA row (128 window rows, 512 picks) are 5.
constexpr int32_t kInvariantRangeKeys = 128;

// The floats of split_workspace a call of `rows` rows uses on the current device (0: it splits
// nothing); max_row_keys and range_keys as AttentionParams', max_row_keys 0 for the most any
// call of `rows` rows can use.
int64_t sink_attention_split_floats(int64_t rows, int32_t heads, int32_t head_dim, int32_t max_row_keys,
                                    int32_t range_keys);

// Whether sink_attention runs on the tensor cores for these parameters: every key format stores
// BF16-exact values (FP8 or FP4 codes under a block scale, as V4.1's window and entries; not F32)
// and head_dim is a multiple of 128 up to 512. Otherwise the SIMT kernel runs.
bool sink_attention_on_tensor_cores(const AttentionParams& params);

// attended [rows, heads, head_dim]: for row t at position p and head h, the sink softmax over the
// keys K = V (window positions max(0, p - W + 1, window_first) .. p in order, then the compressed
// entries in ascending order): sum_j softmax_j(q . k_j * scale with the sink logit sink[h] in the
// denominator) * k_j. Not rotated back (the caller runs rope(inverse) on the result). Both kernels
// sum in f32 (the tensor-core one from three-term BF16 splits of q and of the weights), so they
// agree with each other and with the CPU to rounding.
void sink_attention(const AttentionParams& params, const SegmentRows* segments, const int32_t* row_segment,
                    int64_t rows, const float* q, float* attended, Stream stream);

}  // namespace deepinfer::kernels::cuda

// DSpark's greedy draft head on the device (cuda_kernels.h greedy_draft_head): the Markov loop
// that model/draft_head.cpp runs on the host, so that a greedy draft block brings back gamma
// tokens and confidences instead of gamma rows of logits.
//
// Position k of a block depends on the token of position k - 1, so the loop is sequential in k;
// each position is two launches over all blocks at once: scores (a grid over vocabulary chunks:
// corrected logit z = u + w2 . embedding, each chunk's argmax) and pick (one thread block per
// draft block: the chunks' argmax, the raw confidence, the next embedding). One thread block per
// draft block doing the whole vocabulary would run the 129K x rank Markov product on one SM, at
// a fraction of the memory bandwidth the chunked grid reads it with.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_gate.h"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;
constexpr int64_t kChunk = 2048;  // vocabulary entries a scores block covers
constexpr int64_t kMaxRank = 64;

__device__ __forceinline__ float markov_weight(const uint8_t* data, bool bf16, int64_t index) {
  return bf16 ? bf16_value(load_u16_bytes(data + 2 * index)) : __uint_as_float(load_u32_bytes(data + 4 * index));
}

// The better of two (value, id) candidates: the larger value, ties to the lower id.
__device__ __forceinline__ void keep_better(float& value, int32_t& id, float other_value, int32_t other_id) {
  if (other_value > value || (other_value == value && other_id < id)) {
    value = other_value;
    id = other_id;
  }
}

// The block's best candidate into (value, id) of thread 0.
__device__ void block_argmax(float& value, int32_t& id) {
  __shared__ float values[kThreads / 32];
  __shared__ int32_t ids[kThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    keep_better(value, id, __shfl_down_sync(0xffffffffu, value, offset), __shfl_down_sync(0xffffffffu, id, offset));
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) {
    values[warp] = value;
    ids[warp] = id;
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kThreads / 32; ++w) keep_better(value, id, values[w], ids[w]);
}

__global__ void draft_embed_kernel(const uint8_t* w1, bool bf16, int64_t rank, const int32_t* anchors, int64_t vocab,
                                   float* embeddings) {
  await_previous_grid();
  const int64_t block = blockIdx.x;
  const int32_t token = anchors[block];
  for (int64_t j = threadIdx.x; j < rank; j += blockDim.x)
    embeddings[block * rank + j] = token >= 0 && token < vocab ? markov_weight(w1, bf16, token * rank + j) : 0.0f;
}

// grid (chunks, blocks): each chunk's best corrected logit of draft block blockIdx.y's row k.
__global__ void draft_scores_kernel(const float* __restrict__ logits, int64_t k, int64_t gamma, int64_t vocab,
                                    const uint8_t* w2, bool bf16, int64_t rank, const float* __restrict__ embeddings,
                                    float* partial_values, int32_t* partial_ids) {
  __shared__ float embedding[kMaxRank];
  await_previous_grid();
  const int64_t block = blockIdx.y, chunk = blockIdx.x, chunks = gridDim.x;
  for (int64_t j = threadIdx.x; j < rank; j += blockDim.x) embedding[j] = embeddings[block * rank + j];
  __syncthreads();
  const float* row = logits + (block * gamma + k) * vocab;
  float best = -INFINITY;
  int32_t best_id = INT32_MAX;
  const int64_t end = min(vocab, (chunk + 1) * kChunk);
  for (int64_t v = chunk * kChunk + threadIdx.x; v < end; v += blockDim.x) {
    float z = 0.0f;
    for (int64_t j = 0; j < rank; ++j) z = fmaf(markov_weight(w2, bf16, v * rank + j), embedding[j], z);
    z = row[v] + z;
    if (z != z) z = -INFINITY;  // NaN loses
    keep_better(best, best_id, z, static_cast<int32_t>(v));
  }
  block_argmax(best, best_id);
  if (threadIdx.x == 0) {
    partial_values[block * chunks + chunk] = best;
    partial_ids[block * chunks + chunk] = best_id;
  }
}

// One thread block per draft block: row k's token from the chunks, its raw confidence (with the
// embedding of the token before it), then the embedding of the new token for row k + 1.
__global__ void draft_pick_kernel(const float* partial_values, const int32_t* partial_ids, int64_t chunks, int64_t k,
                                  int64_t gamma, const uint8_t* w1, bool bf16, int64_t rank, float* embeddings,
                                  const float* hidden_confidence, const float* confidence_tail, int32_t* tokens,
                                  float* confidence_raw) {
  __shared__ int32_t picked;
  await_previous_grid();
  const int64_t block = blockIdx.x;
  if (threadIdx.x < 32) {
    float best = -INFINITY;
    int32_t best_id = INT32_MAX;
    for (int64_t c = threadIdx.x; c < chunks; c += 32)
      keep_better(best, best_id, partial_values[block * chunks + c], partial_ids[block * chunks + c]);
    for (int offset = 16; offset > 0; offset /= 2)
      keep_better(best, best_id, __shfl_down_sync(0xffffffffu, best, offset), __shfl_down_sync(0xffffffffu, best_id, offset));
    // The embedding's part of the confidence, in index order as the host's dot.
    if (threadIdx.x == 0) {
      const int64_t row = block * gamma + k;
      float raw = 0.0f;
      for (int64_t j = 0; j < rank; ++j) raw = fmaf(confidence_tail[j], embeddings[block * rank + j], raw);
      confidence_raw[row] = hidden_confidence[row] + raw;
      const int32_t token = best_id == INT32_MAX ? 0 : best_id;  // every logit NaN: the first id, as the host
      tokens[row] = token;
      picked = token;
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < rank; j += blockDim.x)
    embeddings[block * rank + j] = markov_weight(w1, bf16, static_cast<int64_t>(picked) * rank + j);
}

// out[r] = sum_c rows[r, c] * vector[c], one warp a row, in the warp's fixed order.
__global__ void row_dots_kernel(const float* __restrict__ rows, int64_t count, int64_t width,
                                const float* __restrict__ vector, float* out) {
  await_previous_grid();
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < count; r += warps) {
    float sum = 0.0f;
    for (int64_t c = threadIdx.x % 32; c < width; c += 32) sum = fmaf(rows[r * width + c], vector[c], sum);
    sum = warp_sum(sum);
    if (threadIdx.x % 32 == 0) out[r] = sum;
  }
}

bool markov_encoding(const WeightMatrix& w, bool& bf16) {
  bf16 = w.encoding == WeightEncoding::BF16;
  return w.encoding == WeightEncoding::BF16 || w.encoding == WeightEncoding::F32;
}

}  // namespace

bool draft_head_supports(const WeightMatrix& markov_w1, const WeightMatrix& markov_w2) {
  bool bf16 = false;
  return markov_encoding(markov_w1, bf16) && markov_encoding(markov_w2, bf16) && markov_w1.cols == markov_w2.cols &&
         markov_w1.cols >= 1 && markov_w1.cols <= kMaxRank && markov_w1.rows == markov_w2.rows;
}

int64_t draft_head_chunks(int64_t vocab) { return (vocab + kChunk - 1) / kChunk; }

void greedy_draft_head(const float* logits, const float* hidden_confidence, const WeightMatrix& markov_w1,
                       const WeightMatrix& markov_w2, const float* confidence_tail, const int32_t* anchors,
                       int64_t blocks, int64_t gamma, const DraftHeadScratch& scratch, int32_t* tokens,
                       float* confidence_raw, Stream stream) {
  if (launches_skipped()) return;
  if (!draft_head_supports(markov_w1, markov_w2))
    fail("cuda::greedy_draft_head: Markov tables of ", encoding_name(markov_w1.encoding), " / ",
         encoding_name(markov_w2.encoding), " and rank ", markov_w1.cols, " (F32 or BF16, rank 1 to ", kMaxRank, ")");
  if (blocks <= 0 || gamma <= 0) return;
  bool w1_bf16 = false, w2_bf16 = false;
  markov_encoding(markov_w1, w1_bf16);
  markov_encoding(markov_w2, w2_bf16);
  const int64_t vocab = markov_w2.rows, rank = markov_w1.cols, chunks = draft_head_chunks(vocab);
  const auto* w1 = static_cast<const uint8_t*>(markov_w1.data);
  const auto* w2 = static_cast<const uint8_t*>(markov_w2.data);
  cudaStream_t s = native(stream);
  launch(draft_embed_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kMaxRank), 0, s, w1, w1_bf16, rank, anchors,
         vocab, scratch.embeddings);
  for (int64_t k = 0; k < gamma; ++k) {
    launch(draft_scores_kernel, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(blocks)), dim3(kThreads), 0,
           s, logits, k, gamma, vocab, w2, w2_bf16, rank, static_cast<const float*>(scratch.embeddings),
           scratch.partial_values, scratch.partial_ids);
    launch(draft_pick_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, s,
           static_cast<const float*>(scratch.partial_values), static_cast<const int32_t*>(scratch.partial_ids), chunks,
           k, gamma, w1, w1_bf16, rank, scratch.embeddings, hidden_confidence, confidence_tail, tokens,
           confidence_raw);
  }
  check_launch("cuda::greedy_draft_head");
}

void row_dots(const float* rows, int64_t count, int64_t width, const float* vector, float* out, Stream stream) {
  if (launches_skipped()) return;
  if (count < 0 || width < 0) fail("cuda::row_dots: negative size (count ", count, ", width ", width, ")");
  if (count == 0) return;
  launch(row_dots_kernel, grid_for(count * 32, kThreads), kThreads, 0, native(stream), rows, count, width, vector, out);
  check_launch("cuda::row_dots");
}

}  // namespace deepinfer::kernels::cuda

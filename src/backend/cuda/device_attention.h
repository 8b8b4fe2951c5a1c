#pragma once
// Attention's stateful middle on the device (model/attention.h attention_core, one layer of one
// call): the window store, the V4 compressors and CSA indexer, V4.1's latent compressor with its
// FP4 entries and keys, the index sources' picks and candidate blocks, and the sink attention
// over window + compressed rows, all against state in device memory (device_layer_state.h) and
// the sequences' cache blocks (device memory, cache_memory.h). What crosses to the device per
// layer is metadata only: segment bounds, block-table and row addresses, entry lists.
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/staging.h"
#include "backend/cuda/linear_runner.h"
#include "backend/cuda/op_profile.h"
#include "backend/cuda/side_branch.h"
#include "model/attention.h"

namespace deepinfer::backend::cuda {

// The layer's inputs, on the device, for the pass's current rows.
struct AttentionInputs {
  const float* x = nullptr;           // [rows, D] the normed sublayer input
  const float* q_residual = nullptr;  // [rows, q_rank] normed
  const float* q = nullptr;           // [rows, heads, d] rotated
  const float* kv = nullptr;          // [rows, d] normed, rotated
  const int32_t* positions = nullptr;  // [rows]
  std::span<const int64_t> host_positions;
  int64_t rows = 0;
  int64_t first_row = 0;  // rows of the call dropped before this layer (decoder window replay)
};

// One per forward pass: holds what the layers of one call share (the sequences' block tables on
// the device, the latest index source's picks, the candidate source's blocks).
//
// context_bound > 0 fixes every size that would otherwise follow the call's data, as a captured
// graph needs (step_graphs.h): call_rows is then the batch bucket, whose rows past the call's
// segments are padding (row segment -1: they see and write nothing); a decode step of sequences
// no longer than context_bound launches one entry slot and one segment slot per row of the bucket
// for each compressor (padding marked), scores strided by context_bound / ratio and block tables
// of context_bound / block_tokens entries, so the same kernels with the same sizes run at every
// step of its key. 0: sizes exact.
class DeviceAttention {
 public:
  // linear: how the pass runs linear (linear_runner.h); side: the pass's side branch
  // (side_branch.h); profile: times the middle's parts (DEEPINFER_CUDA_PROFILE=1); tensor_cores
  // false keeps the sink attention on its SIMT kernel (DEEPINFER_CUDA_SIMT=1); range_keys is its key
  // ranges (AttentionParams::range_keys: 0, or kInvariantRangeKeys under --batch-invariant).
  DeviceAttention(WeightStore& weights, Arena& arena, Staging& staging, cudaStream_t stream,
                  cudaStream_t setup_stream, int64_t call_rows, int64_t context_bound, const LinearRunner& linear,
                  const SideLane& side, OpProfile& profile, bool tensor_cores, int32_t range_keys)
      : weights_(weights),
        arena_(arena),
        staging_(staging),
        stream_(stream),
        setup_stream_(setup_stream),
        call_rows_(call_rows),
        context_bound_(context_bound),
        linear_(linear),
        side_(side),
        profile_(profile),
        tensor_cores_(tensor_cores),
        range_keys_(range_keys) {}

  // attended [rows, heads, d], rotated back; the segments' states move past their rows.
  void run(const model::AttentionWeights& weights, std::span<const model::AttentionSegment> segments,
           const AttentionInputs& in, float* attended);

  // Decoder window replay: the layer's window restarts empty at first_position.
  void restart_window(model::AttentionState& state, int64_t first_position);

  // run() leaves its rows' store into the window rings on the side lane, beside the output
  // projection that follows it (nothing of the call reads those rings again): the pass joins it
  // before the side lane's next branch or the next layer's K = V rows (its exit does).
  void join_window_store();

 private:
  struct Layer;
  std::byte* const* block_table(const model::CachePages* pages);
  void compress(Layer& layer, const model::CompressorWeights& compressor, bool indexer_keys);
  // On `stream` with `linear` (the side branch's, beside the index queries).
  void publish_latents(Layer& layer, cudaStream_t stream, const LinearRunner& linear);
  void select(Layer& layer);
  void index_v4(Layer& layer);
  void download_picks(Layer& layer, bool picked);

  // The entry slots of a compressor launch that closes `count` entries, and the segments of a
  // layer's launches (with a context bound: one per row of the bucket, past the call's own ones
  // padding).
  int64_t entry_slots(int64_t count) const;
  int64_t segment_slots(const Layer& layer) const;

  WeightStore& weights_;
  Arena& arena_;
  Staging& staging_;
  cudaStream_t stream_;
  cudaStream_t setup_stream_;  // new layer states are made on it (never captured)
  int64_t call_rows_;
  int64_t context_bound_;
  LinearRunner linear_;
  SideLane side_;
  OpProfile& profile_;
  bool tensor_cores_;
  int32_t range_keys_;
  bool tables_ready_ = false;
  std::unordered_map<const model::CachePages*, std::byte* const*> tables_;
  int32_t* picks_ = nullptr;  // [call rows, pick_stride_], indexed by the call's original rows
  int32_t* pick_count_ = nullptr;
  int64_t pick_stride_ = 0;
  uint8_t* candidate_mask_ = nullptr;  // [call rows, mask_stride_]
  int64_t mask_stride_ = 0;
  std::optional<SideBranch> window_store_;
};

}  // namespace deepinfer::backend::cuda

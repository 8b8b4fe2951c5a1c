#pragma once
// The KV compressor of ratio > 0 layers (v4_arch.md §2.4.1), also used at index_head_dim inside
// the lightning indexer. Every `ratio` tokens close a window that becomes one compressed entry:
// a per-channel softmax-gated sum of the window's projected KV, RMS-normed and rotated at the
// window's first position. HCA (no overlap) pools one window; CSA (overlap) pools the A half of
// the previous window with the B half of the current one (2 * ratio slots).
//
// Incremental by construction: tokens of the open window wait in the state, so an entry is
// computed from exactly the same numbers whatever the chunking.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/paged_rows.h"
#include "model/rope.h"
#include "model/weights.h"

namespace deepinfer::model {

struct CompressorWeights {
  kernels::WeightMatrix wkv;    // [c * d, D]
  kernels::WeightMatrix wgate;  // [c * d, D]
  std::vector<float> ape;       // [ratio, c * d], added to the gate logits by in-window offset
  std::vector<float> norm;      // [d]
  int64_t ratio = 0;
  int64_t head_dim = 0;  // d
  bool overlap = false;  // c = 2 when true
  float eps = 0;
  int64_t width() const { return overlap ? 2 * head_dim : head_dim; }
};

// prefix: "layers.L.attn.compressor." or "layers.L.attn.indexer.compressor.".
CompressorWeights load_compressor(const Weights& weights, const std::string& prefix, int64_t ratio, int64_t head_dim,
                                  bool overlap, float eps);

struct CompressorState {
  std::vector<float> open_kv;    // [tokens in the open window, c * d]
  std::vector<float> open_gate;  // same, ape already added
  std::vector<float> previous_kv;  // overlap: the last closed window's rows [ratio, c * d]
  std::vector<float> previous_gate;
  PagedRows entries;  // [entries, d], f32, in the sequence's cache blocks
};

// Feeds `tokens` rows of the sublayer input x ([tokens, D], positions first_position...) and
// appends every entry whose window closes. Positions must continue the state's.
void compress(const CompressorWeights& weights, const RopeTable& rope, CompressorState& state, const float* x,
              int64_t tokens, int64_t first_position);

}  // namespace deepinfer::model

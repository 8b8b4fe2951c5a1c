#pragma once
// The V4.1 (CSA2) compressor of a kv-source layer. Ratio r > 1: every r tokens close a group
// whose latent is the per-channel softmax(gate)-weighted sum of the group's projected KV (f32,
// no position bias, no overlap); ratio 1: each token's projection is its own latent, no gate.
// Either way the latent is RMS-normed and returned BEFORE RoPE: the index keys derive from the
// unrotated latent, the compressed KV from the rotated one (shared_compressed.h).
//
// Incremental: tokens of an unfinished group wait in the state, so a latent is the same numbers
// whatever the chunking.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "model/weights.h"

namespace deepinfer::model {

struct LatentCompressorWeights {
  kernels::WeightMatrix wkv;                   // [d, D]
  std::optional<kernels::WeightMatrix> wgate;  // [d, D]; ratio > 1 only
  std::vector<float> norm;                     // [d]
  int64_t ratio = 0;
  int64_t head_dim = 0;
  float eps = 0;
};

// prefix: "layers.L.attn.compressor.".
LatentCompressorWeights load_latent_compressor(const Weights& weights, const std::string& prefix, int64_t ratio,
                                               int64_t head_dim, float eps);

struct LatentCompressorState {
  std::vector<float> open_kv;    // [tokens of the unfinished group, d]
  std::vector<float> open_gate;  // same
  int64_t entry_count = 0;       // latents emitted so far; group g starts at position g * ratio
};

struct Latents {
  std::vector<float> values;  // [count, d], pre-RoPE
  int64_t first_entry = 0;    // entry index of the first row
  int64_t count = 0;
};

// Feeds `tokens` rows of x ([tokens, D], positions first_position...) and returns the latents of
// every group that closed. Positions must continue the state's.
Latents compress_latents(const LatentCompressorWeights& weights, LatentCompressorState& state, const float* x,
                         int64_t tokens, int64_t first_position);

}  // namespace deepinfer::model

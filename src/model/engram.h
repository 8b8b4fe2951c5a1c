#pragma once
// DeepSeek-V4.1 Engram: an n-gram memory written into the residual streams before the block at
// each engram layer (transformers deepseek_v41 DeepseekV41Engram). The hash ids of every new
// token are computed once per forward for all engram layers (EngramHasher); each engram layer
// gathers its rows, projects them with `wkv` into one key per hc stream plus a shared value, and
// adds the value to each stream through a gate:
//   gate = sigmoid(signed sqrt(max(|dot|, 1e-6))),
//   dot  = sum_d(h q_weight k_weight key) rsqrt(mean h^2 + eps) rsqrt(mean key^2 + eps) / sqrt(D)
// per (token, stream); streams += gate * value.
#include <cstdint>
#include <span>
#include <vector>

#include "io/model_config.h"
#include "io/tokenizer/tokenizer.h"
#include "kernels/kernels.h"
#include "model/engram_hash.h"
#include "model/engram_table.h"
#include "model/weights.h"

namespace deepinfer::model {

struct EngramLayerWeights {
  EngramTable table;                  // `engram.embed` [rows, head_dim]
  kernels::WeightMatrix wkv;          // [(hc_mult + 1) * hidden, cols * head_dim], stored encoding
  std::vector<float> q_weight;        // [hc_mult, hidden]
  std::vector<float> k_weight;        // [hc_mult, hidden]
};

class Engram {
 public:
  // All engram layers of `config` (config.engram.layer_ids, in order) from the checkpoint, and the
  // compressed token map from `tokenizer`. Throws deepinfer::Error on a missing tensor, a wrong
  // shape, or a tokenizer whose compressed vocabulary does not match the config.
  static Engram load(const ModelConfig& config, const Weights& weights, const Tokenizer& tokenizer);
  // From parts (tests; other weight sources). `layers` follow config.engram.layer_ids.
  Engram(const ModelConfig& config, EngramHasher hasher, std::vector<EngramLayerWeights> layers);

  EngramHashState new_state() const { return hasher_.new_state(); }
  // Hash ids of the n-grams ending at each new token: [tokens, layers(), cols()].
  std::vector<int64_t> hash(EngramHashState& state, std::span<const int32_t> tokens) const {
    return hasher_.hash(state, tokens);
  }
  // Adds engram layer `layer_index` (0-based among engram layers) to `streams`
  // [tokens, hc_mult, hidden] in place. `hash_ids` is hash()'s whole output for these tokens.
  void apply(int layer_index, std::span<const int64_t> hash_ids, std::span<float> streams, int64_t tokens) const;

  // apply()'s two halves, for backends that run the projection and the gate themselves
  // (backend/cuda; the tables stay in host memory, as the release intends): the table rows the
  // hash ids of layer `layer_index` select, [tokens, cols * head_dim]; then the layer's wkv, and
  // its gate weights (q_weight * k_weight, [hc_mult, hidden]).
  std::vector<float> gather(int layer_index, std::span<const int64_t> hash_ids, int64_t tokens) const;
  const EngramLayerWeights& layer(int layer_index) const { return layers_[static_cast<std::size_t>(layer_index)]; }
  std::span<const float> gate_weight(int layer_index) const {
    return gate_weights_[static_cast<std::size_t>(layer_index)];
  }
  double eps() const { return eps_; }

  int layers() const { return static_cast<int>(layers_.size()); }
  int64_t cols() const { return hasher_.layout().cols(); }
  const EngramHasher& hasher() const { return hasher_; }

 private:
  EngramHasher hasher_;
  std::vector<EngramLayerWeights> layers_;
  std::vector<std::vector<float>> gate_weights_;  // q_weight * k_weight per layer (only the product is used)
  int64_t hidden_ = 0;
  int64_t hc_mult_ = 0;
  int64_t head_dim_ = 0;
  double eps_ = 0;
};

}  // namespace deepinfer::model

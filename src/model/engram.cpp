#include "model/engram.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "model/engram_token_map.h"

namespace deepinfer::model {

Engram Engram::load(const ModelConfig& config, const Weights& weights, const Tokenizer& tokenizer) {
  EngramHasher hasher(config.engram, build_compressed_token_map(tokenizer));
  std::vector<EngramLayerWeights> layers;
  for (int64_t layer : config.engram.layer_ids) {
    const std::string prefix = "layers." + std::to_string(layer) + ".engram.";
    const std::string scale_name = prefix + "embed.scale";
    std::optional<TensorView> scale;
    if (weights.has(scale_name)) scale = weights.view(scale_name);
    layers.push_back(EngramLayerWeights{
        EngramTable(weights.view(prefix + "embed.weight"), std::move(scale), prefix + "embed.weight"),
        weights.matrix(prefix + "wkv.weight"),
        weights.floats(prefix + "q_weight"),
        weights.floats(prefix + "k_weight"),
    });
  }
  return Engram(config, std::move(hasher), std::move(layers));
}

Engram::Engram(const ModelConfig& config, EngramHasher hasher, std::vector<EngramLayerWeights> layers)
    : hasher_(std::move(hasher)),
      layers_(std::move(layers)),
      hidden_(config.hidden_size),
      hc_mult_(config.hc_mult),
      head_dim_(config.engram.head_dim),
      eps_(config.rms_norm_eps) {
  const EngramConfig& e = config.engram;
  if (layers_.size() != e.layer_ids.size())
    fail("Engram: ", layers_.size(), " layers of weights for ", e.layer_ids.size(), " `engram_layer_ids`");
  const int64_t lookups = hasher_.layout().cols();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const EngramLayerWeights& w = layers_[i];
    const std::string where = "Engram layer " + std::to_string(e.layer_ids[i]) + ": ";
    if (w.table.cols() != head_dim_)
      fail(where, "table rows have ", w.table.cols(), " columns, `engram_head_dim` is ", head_dim_);
    const int64_t used = hasher_.layout().rows_used(static_cast<int64_t>(i));
    if (w.table.rows() < used)
      fail(where, "table has ", w.table.rows(), " rows but its hash buckets span ", used);
    if (w.wkv.rows != (hc_mult_ + 1) * hidden_ || w.wkv.cols != lookups * head_dim_)
      fail(where, "wkv is [", w.wkv.rows, ", ", w.wkv.cols, "], expected [", (hc_mult_ + 1) * hidden_, ", ",
           lookups * head_dim_, "]");
    const auto gate_size = static_cast<std::size_t>(hc_mult_ * hidden_);
    if (w.q_weight.size() != gate_size || w.k_weight.size() != gate_size)
      fail(where, "q_weight / k_weight have ", w.q_weight.size(), " / ", w.k_weight.size(), " values, expected ",
           gate_size);
    std::vector<float> product(gate_size);
    for (std::size_t j = 0; j < gate_size; ++j) product[j] = w.q_weight[j] * w.k_weight[j];
    gate_weights_.push_back(std::move(product));
  }
}

std::vector<float> Engram::gather(int layer_index, std::span<const int64_t> hash_ids, int64_t tokens) const {
  if (layer_index < 0 || layer_index >= layers())
    fail("Engram: layer index ", layer_index, " of ", layers(), " engram layers");
  const int64_t cols = this->cols();
  const auto layer_count = static_cast<int64_t>(layers());
  if (tokens < 0 || static_cast<int64_t>(hash_ids.size()) != tokens * layer_count * cols)
    fail("Engram: ", tokens, " tokens need ", tokens * layer_count * cols, " hash ids, got ", hash_ids.size());
  const EngramLayerWeights& w = layers_[static_cast<std::size_t>(layer_index)];
  // Flattened per token: [tokens, cols * head_dim].
  const int64_t embedded_width = cols * head_dim_;
  std::vector<float> embedded(static_cast<std::size_t>(tokens * embedded_width));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t c = 0; c < cols; ++c)
      w.table.gather(hash_ids[static_cast<std::size_t>((t * layer_count + layer_index) * cols + c)],
                     &embedded[static_cast<std::size_t>(t * embedded_width + c * head_dim_)]);
  return embedded;
}

void Engram::apply(int layer_index, std::span<const int64_t> hash_ids, std::span<float> streams, int64_t tokens) const {
  const std::vector<float> embedded = gather(layer_index, hash_ids, tokens);
  if (static_cast<int64_t>(streams.size()) != tokens * hc_mult_ * hidden_)
    fail("Engram::apply: ", tokens, " tokens need ", tokens * hc_mult_ * hidden_, " stream values, got ",
         streams.size());
  const EngramLayerWeights& w = layers_[static_cast<std::size_t>(layer_index)];
  const std::vector<float>& gate_weight = gate_weights_[static_cast<std::size_t>(layer_index)];

  const int64_t kv_width = (hc_mult_ + 1) * hidden_;
  std::vector<float> kv(static_cast<std::size_t>(tokens * kv_width));
  kernels::linear(embedded.data(), tokens, w.wkv, kv.data());

  const double inv_sqrt_hidden = 1.0 / std::sqrt(static_cast<double>(hidden_));
  for (int64_t t = 0; t < tokens; ++t) {
    const float* value = &kv[static_cast<std::size_t>(t * kv_width + hc_mult_ * hidden_)];
    for (int64_t s = 0; s < hc_mult_; ++s) {
      float* h = &streams[static_cast<std::size_t>((t * hc_mult_ + s) * hidden_)];
      const float* key = &kv[static_cast<std::size_t>(t * kv_width + s * hidden_)];
      const float* weight = &gate_weight[static_cast<std::size_t>(s * hidden_)];
      double h_square = 0, key_square = 0, dot = 0;
      for (int64_t d = 0; d < hidden_; ++d) {
        h_square += static_cast<double>(h[d]) * h[d];
        key_square += static_cast<double>(key[d]) * key[d];
        dot += static_cast<double>(h[d]) * weight[d] * key[d];
      }
      // Normalised per (token, stream) over the hidden size, not jointly over the streams.
      const double n = static_cast<double>(hidden_);
      const double scaled = dot / std::sqrt(h_square / n + eps_) / std::sqrt(key_square / n + eps_) * inv_sqrt_hidden;
      const double signed_root = std::copysign(std::sqrt(std::max(std::fabs(scaled), 1e-6)), scaled);
      const auto gate = static_cast<float>(1.0 / (1.0 + std::exp(-signed_root)));
      for (int64_t d = 0; d < hidden_; ++d) h[d] += gate * value[d];
    }
  }
}

}  // namespace deepinfer::model

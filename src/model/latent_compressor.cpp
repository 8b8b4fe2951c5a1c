#include "model/latent_compressor.h"

#include "core/error.h"
#include "model/ops.h"

namespace deepinfer::model {

LatentCompressorWeights load_latent_compressor(const Weights& weights, const std::string& prefix, int64_t ratio,
                                               int64_t head_dim, float eps) {
  LatentCompressorWeights out;
  out.wkv = weights.matrix(prefix + "wkv.weight");
  if (ratio > 1) out.wgate = weights.matrix(prefix + "wgate.weight");
  out.norm = weights.floats(prefix + "norm.weight");
  out.ratio = ratio;
  out.head_dim = head_dim;
  out.eps = eps;
  if (out.wkv.rows != head_dim || (out.wgate && out.wgate->rows != head_dim) ||
      static_cast<int64_t>(out.norm.size()) != head_dim)
    fail(weights.path(), ": compressor ", prefix, " does not produce ", head_dim, " channels");
  return out;
}

Latents compress_latents(const LatentCompressorWeights& weights, LatentCompressorState& state, const float* x,
                         int64_t tokens, int64_t first_position) {
  const int64_t d = weights.head_dim;
  const int64_t ratio = weights.ratio;
  const int64_t open_rows = static_cast<int64_t>(state.open_kv.size()) / d;
  if (first_position != state.entry_count * ratio + open_rows)
    fail("compressor fed position ", first_position, " after ", state.entry_count * ratio + open_rows, " tokens");
  std::vector<float> kv(static_cast<std::size_t>(tokens * d));
  kernels::linear(x, tokens, weights.wkv, kv.data());
  Latents out;
  out.first_entry = state.entry_count;
  if (!weights.wgate) {
    out.values = std::move(kv);
    out.count = tokens;
  } else {
    std::vector<float> gate(static_cast<std::size_t>(tokens * d));
    kernels::linear(x, tokens, *weights.wgate, gate.data());
    state.open_kv.insert(state.open_kv.end(), kv.begin(), kv.end());
    state.open_gate.insert(state.open_gate.end(), gate.begin(), gate.end());
    out.count = static_cast<int64_t>(state.open_kv.size()) / d / ratio;
    out.values.assign(static_cast<std::size_t>(out.count * d), 0.0f);
    std::vector<float> slot_weights(static_cast<std::size_t>(ratio));
    for (int64_t g = 0; g < out.count; ++g)
      for (int64_t e = 0; e < d; ++e) {
        for (int64_t j = 0; j < ratio; ++j) slot_weights[j] = state.open_gate[(g * ratio + j) * d + e];
        softmax(slot_weights.data(), ratio);
        float sum = 0.0f;
        for (int64_t j = 0; j < ratio; ++j) sum += state.open_kv[(g * ratio + j) * d + e] * slot_weights[j];
        out.values[g * d + e] = sum;
      }
    const auto used = static_cast<std::ptrdiff_t>(out.count * ratio * d);
    state.open_kv.erase(state.open_kv.begin(), state.open_kv.begin() + used);
    state.open_gate.erase(state.open_gate.begin(), state.open_gate.begin() + used);
  }
  for (int64_t g = 0; g < out.count; ++g)
    rms_norm(out.values.data() + g * d, d, weights.norm.data(), weights.eps, out.values.data() + g * d);
  state.entry_count += out.count;
  return out;
}

}  // namespace deepinfer::model

#pragma once
// Manifold-constrained hyper-connections (v4_arch.md §2.2): the residual is hc_mult streams; each
// sublayer site mixes them into one input (pre), and writes its output back (post) on top of a
// Sinkhorn-projected stream mixing (comb). The head collapses the streams with pre weights only.
#include <cstdint>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "kernels/kernels.h"
#include "model/weights.h"

namespace deepinfer::model {

struct HyperConnectionWeights {
  kernels::WeightMatrix fn;  // [(2 + n) * n, n * D] (head: [n, n * D])
  std::vector<float> base;   // [(2 + n) * n] (head: [n])
  std::vector<float> scale;  // [3] (head: [1])
};

// site: "attn" or "ffn" under `prefix` ("layers.L."); the head's are model-level (hc_head_*).
HyperConnectionWeights load_hyper_connection(const Weights& weights, const std::string& prefix, const std::string& site);
HyperConnectionWeights load_hyper_head(const Weights& weights, const std::string& prefix);

struct HyperConnectionShape {
  int64_t streams = 0;  // hc_mult
  int64_t hidden = 0;   // D
  int64_t sinkhorn_iters = 0;
  float hc_eps = 0;
  float norm_eps = 0;
  static HyperConnectionShape of(const ModelConfig& config);
};

// Per-token mixing weights of one site.
struct HyperMix {
  std::vector<float> pre;   // [tokens, n]
  std::vector<float> post;  // [tokens, n]
  std::vector<float> comb;  // [tokens, n, n]; comb[j][k]: weight of input stream j in output stream k
};

// streams: [tokens, n, D] -> the site's pre / post / comb, without collapsing.
HyperMix hyper_mix(const HyperConnectionWeights& weights, const HyperConnectionShape& shape, const float* streams,
                   int64_t tokens);
// collapsed[t] = sum_i pre[t, i] * streams[t, i].
void hyper_collapse(const float* pre, const HyperConnectionShape& shape, const float* streams, int64_t tokens,
                    float* collapsed);
// V4: the site collapses with its own pre. Writes the collapsed sublayer input [tokens, D].
HyperMix hyper_pre(const HyperConnectionWeights& weights, const HyperConnectionShape& shape, const float* streams,
                   int64_t tokens, float* collapsed);
// streams[t, k] = post[t, k] * output[t] + sum_j comb[t, j, k] * streams[t, j], in place.
void hyper_post(const HyperMix& mix, const HyperConnectionShape& shape, const float* output, int64_t tokens,
                float* streams);
// V4.1 (single pass): a site collapses with the pre of the site before it (the first site with
// a one-hot pre on stream 0), and the model collapses with the last FFN site's pre; no hyper-head.
std::vector<float> one_hot_pre(const HyperConnectionShape& shape, int64_t tokens);
// V4: the final collapse before the model norm: [tokens, n, D] -> [tokens, D].
void hyper_head(const HyperConnectionWeights& weights, const HyperConnectionShape& shape, const float* streams,
                int64_t tokens, float* collapsed);

}  // namespace deepinfer::model

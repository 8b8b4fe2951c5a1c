#include "model/hyper_connections.h"

#include <cmath>

#include "model/ops.h"
#include "model/parallel.h"

namespace deepinfer::model {
namespace {

// Each token's streams flattened and scaled to unit RMS, then projected by fn: [tokens, rows(fn)].
std::vector<float> mix_logits(const kernels::WeightMatrix& fn, const HyperConnectionShape& shape, const float* streams,
                              int64_t tokens) {
  const int64_t width = shape.streams * shape.hidden;
  std::vector<float> normalized(static_cast<std::size_t>(tokens * width));
  parallel_items(tokens, 2 * width, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      rms_norm(streams + t * width, width, nullptr, shape.norm_eps, normalized.data() + t * width);
  });
  std::vector<float> logits(static_cast<std::size_t>(tokens * fn.rows));
  kernels::linear(normalized.data(), tokens, fn, logits.data());
  return logits;
}

void collapse(const float* streams, const float* pre, const HyperConnectionShape& shape, float* out) {
  for (int64_t d = 0; d < shape.hidden; ++d) {
    float sum = 0.0f;
    for (int64_t i = 0; i < shape.streams; ++i) sum += pre[i] * streams[i * shape.hidden + d];
    out[d] = sum;
  }
}

}  // namespace

HyperConnectionShape HyperConnectionShape::of(const ModelConfig& config) {
  return {config.hc_mult, config.hidden_size, config.hc_sinkhorn_iters, static_cast<float>(config.hc_eps),
          static_cast<float>(config.rms_norm_eps)};
}

HyperConnectionWeights load_hyper_connection(const Weights& weights, const std::string& prefix, const std::string& site) {
  const std::string stem = prefix + "hc_" + site + "_";
  return {weights.matrix(stem + "fn"), weights.floats(stem + "base"), weights.floats(stem + "scale")};
}

HyperConnectionWeights load_hyper_head(const Weights& weights, const std::string& prefix) {
  return {weights.matrix(prefix + "hc_head_fn"), weights.floats(prefix + "hc_head_base"),
          weights.floats(prefix + "hc_head_scale")};
}

HyperMix hyper_mix(const HyperConnectionWeights& weights, const HyperConnectionShape& shape, const float* streams,
                   int64_t tokens) {
  const int64_t n = shape.streams;
  const int64_t mixes = (2 + n) * n;
  const std::vector<float> logits = mix_logits(weights.fn, shape, streams, tokens);
  HyperMix mix{std::vector<float>(static_cast<std::size_t>(tokens * n)),
               std::vector<float>(static_cast<std::size_t>(tokens * n)),
               std::vector<float>(static_cast<std::size_t>(tokens * n * n))};
  // The Sinkhorn rounds of each token on their own: tokens split across threads.
  const int64_t sinkhorn_work = 4 * n * n * shape.sinkhorn_iters;
  parallel_items(tokens, sinkhorn_work, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* row = logits.data() + t * mixes;
      for (int64_t i = 0; i < n; ++i) {
        mix.pre[t * n + i] = sigmoid(row[i] * weights.scale[0] + weights.base[i]) + shape.hc_eps;
        mix.post[t * n + i] = 2.0f * sigmoid(row[n + i] * weights.scale[1] + weights.base[n + i]);
      }
      float* comb = mix.comb.data() + t * n * n;
      for (int64_t j = 0; j < n * n; ++j) comb[j] = row[2 * n + j] * weights.scale[2] + weights.base[2 * n + j];
      // Truncated Sinkhorn exactly as the reference runs it: row softmax (+eps), one column
      // normalisation, then (iters - 1) rounds of row then column normalisation.
      for (int64_t j = 0; j < n; ++j) {
        softmax(comb + j * n, n);
        for (int64_t k = 0; k < n; ++k) comb[j * n + k] += shape.hc_eps;
      }
      auto normalize_columns = [&] {
        for (int64_t k = 0; k < n; ++k) {
          float sum = 0.0f;
          for (int64_t j = 0; j < n; ++j) sum += comb[j * n + k];
          for (int64_t j = 0; j < n; ++j) comb[j * n + k] /= sum + shape.hc_eps;
        }
      };
      auto normalize_rows = [&] {
        for (int64_t j = 0; j < n; ++j) {
          float sum = 0.0f;
          for (int64_t k = 0; k < n; ++k) sum += comb[j * n + k];
          for (int64_t k = 0; k < n; ++k) comb[j * n + k] /= sum + shape.hc_eps;
        }
      };
      normalize_columns();
      for (int64_t iter = 1; iter < shape.sinkhorn_iters; ++iter) {
        normalize_rows();
        normalize_columns();
      }
    }
  });
  return mix;
}

void hyper_collapse(const float* pre, const HyperConnectionShape& shape, const float* streams, int64_t tokens,
                    float* collapsed) {
  const int64_t n = shape.streams;
  parallel_items(tokens, n * shape.hidden, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      collapse(streams + t * n * shape.hidden, pre + t * n, shape, collapsed + t * shape.hidden);
  });
}

HyperMix hyper_pre(const HyperConnectionWeights& weights, const HyperConnectionShape& shape, const float* streams,
                   int64_t tokens, float* collapsed) {
  HyperMix mix = hyper_mix(weights, shape, streams, tokens);
  hyper_collapse(mix.pre.data(), shape, streams, tokens, collapsed);
  return mix;
}

std::vector<float> one_hot_pre(const HyperConnectionShape& shape, int64_t tokens) {
  std::vector<float> pre(static_cast<std::size_t>(tokens * shape.streams), 0.0f);
  for (int64_t t = 0; t < tokens; ++t) pre[t * shape.streams] = 1.0f;
  return pre;
}

void hyper_post(const HyperMix& mix, const HyperConnectionShape& shape, const float* output, int64_t tokens,
                float* streams) {
  const int64_t n = shape.streams;
  const int64_t d_model = shape.hidden;
  parallel_items(tokens, n * n * d_model, [&](int64_t begin, int64_t end) {
    std::vector<float> previous(static_cast<std::size_t>(n * d_model));
    for (int64_t t = begin; t < end; ++t) {
      float* token_streams = streams + t * n * d_model;
      std::copy(token_streams, token_streams + n * d_model, previous.begin());
      const float* comb = mix.comb.data() + t * n * n;
      for (int64_t k = 0; k < n; ++k) {
        const float post = mix.post[t * n + k];
        for (int64_t d = 0; d < d_model; ++d) {
          float mixed = 0.0f;
          for (int64_t j = 0; j < n; ++j) mixed += comb[j * n + k] * previous[j * d_model + d];
          token_streams[k * d_model + d] = post * output[t * d_model + d] + mixed;
        }
      }
    }
  });
}

void hyper_head(const HyperConnectionWeights& weights, const HyperConnectionShape& shape, const float* streams,
                int64_t tokens, float* collapsed) {
  const int64_t n = shape.streams;
  const std::vector<float> logits = mix_logits(weights.fn, shape, streams, tokens);
  std::vector<float> pre(static_cast<std::size_t>(n));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < n; ++i)
      pre[i] = sigmoid(logits[t * n + i] * weights.scale[0] + weights.base[i]) + shape.hc_eps;
    collapse(streams + t * n * shape.hidden, pre.data(), shape, collapsed + t * shape.hidden);
  }
}

}  // namespace deepinfer::model

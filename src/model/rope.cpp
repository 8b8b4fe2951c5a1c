#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace deepinfer::model {
namespace {

// Frequencies as base^(-2i/dims), with the exponent rounded to f32 first (how the reference
// computes them: a float32 arange divided by dims).
std::vector<double> base_frequencies(double theta, int64_t rope_dims) {
  std::vector<double> frequencies;
  for (int64_t i = 0; i < rope_dims; i += 2) {
    const float exponent = static_cast<float>(i) / static_cast<float>(rope_dims);
    frequencies.push_back(1.0 / std::pow(theta, static_cast<double>(exponent)));
  }
  return frequencies;
}

// YaRN's correction dimension: where the rotation count over the original context is `rotations`.
double correction_dim(double rotations, int64_t dims, double theta, double original_context) {
  return static_cast<double>(dims) * std::log(original_context / (rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(theta));
}

}  // namespace

RopeTable RopeTable::plain(double theta, int64_t rope_dims) {
  RopeTable table;
  for (double f : base_frequencies(theta, rope_dims)) table.inv_freq_.push_back(static_cast<float>(f));
  return table;
}

RopeTable RopeTable::yarn(double theta, int64_t rope_dims, const YarnScaling& scaling) {
  const double context = static_cast<double>(scaling.original_max_position_embeddings);
  double low = std::floor(correction_dim(scaling.beta_fast, rope_dims, theta, context));
  double high = std::ceil(correction_dim(scaling.beta_slow, rope_dims, theta, context));
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(rope_dims - 1));
  if (low == high) high += 0.001;
  RopeTable table;
  const auto frequencies = base_frequencies(theta, rope_dims);
  for (std::size_t i = 0; i < frequencies.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    const double f = frequencies[i];
    table.inv_freq_.push_back(
        static_cast<float>(f / scaling.factor * (1.0 - extrapolation_weight) + f * extrapolation_weight));
  }
  return table;
}

RopeTable RopeTable::for_layer(const ModelConfig& config, int64_t layer) {
  if (!config.uses_compress_rope(layer)) return plain(config.rope_theta, config.rope_head_dim);
  if (config.yarn) return yarn(config.compress_rope_theta, config.rope_head_dim, *config.yarn);
  return plain(config.compress_rope_theta, config.rope_head_dim);
}

void RopeTable::apply(float* x, int64_t n, int64_t position, bool inverse) const {
  const int64_t dims = rope_dims();
  if (n < dims) fail("RoPE over ", dims, " dims applied to a vector of ", n);
  float* tail = x + (n - dims);
  const float pos = static_cast<float>(position);
  for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
    const float angle = pos * inv_freq_[i];
    const float cosine = std::cos(angle);
    const float sine = inverse ? -std::sin(angle) : std::sin(angle);
    const float even = tail[2 * i];
    const float odd = tail[2 * i + 1];
    tail[2 * i] = even * cosine + (-odd) * sine;
    tail[2 * i + 1] = odd * cosine + even * sine;
  }
}

}  // namespace deepinfer::model

#pragma once
// V4's interleaved partial RoPE (v4_arch.md §2.3): the trailing rope dims of a vector are pairs
// (x[2i], x[2i+1]) rotated by pos * inv_freq[i]. Window-only layers use rope_theta without YaRN;
// compressed layers (their compressor and indexer too) use compress_rope_theta with YaRN.
#include <cstdint>
#include <vector>

#include "io/model_config.h"

namespace deepinfer::model {

class RopeTable {
 public:
  // The table `layer` uses: plain rope_theta for ratio-0 layers, compress_rope_theta (+ YaRN) else.
  static RopeTable for_layer(const ModelConfig& config, int64_t layer);
  static RopeTable plain(double theta, int64_t rope_dims);
  static RopeTable yarn(double theta, int64_t rope_dims, const YarnScaling& scaling);

  int64_t rope_dims() const { return static_cast<int64_t>(inv_freq_.size()) * 2; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // Rotates the last rope_dims() of x[0, n) for `position`; `inverse` rotates back (angle negated).
  void apply(float* x, int64_t n, int64_t position, bool inverse = false) const;

 private:
  std::vector<float> inv_freq_;
};

}  // namespace deepinfer::model

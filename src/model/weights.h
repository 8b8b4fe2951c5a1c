#pragma once
// A checkpoint's tensors under deepinfer's canonical (DeepSeek) names, whichever spelling the
// file used, handed out as kernel weight matrices in their stored encoding (F32, BF16, FP8
// block-scaled, FP4 group-scaled) or, for the small per-channel vectors, as f32 copies.
// Nothing large is ever dequantized: matrices point into the checkpoint's mapping.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint.h"
#include "io/model_config.h"
#include "io/tensor_names.h"
#include "kernels/kernels.h"

namespace deepinfer::model {

class Weights {
 public:
  // Opens the checkpoint in `dir` and refuses it (naming the tensors) when `config` expects a
  // tensor it lacks or stores one with the wrong dtype or shape.
  static Weights open(const std::string& dir, const ModelConfig& config);

  bool has(const std::string& canonical) const { return entries_.contains(canonical); }
  // `canonical` names the weight ("layers.3.attn.wq_a.weight"); a quantized weight's `.scale`
  // sibling is found and validated here.
  kernels::WeightMatrix matrix(const std::string& canonical) const;
  // Row slice [row_begin, row_begin + rows) of a matrix (grouped projections). FP8 slices must
  // not straddle a scale tile boundary except at its start.
  kernels::WeightMatrix matrix_rows(const std::string& canonical, int64_t row_begin, int64_t rows) const;
  // Any float tensor converted to f32 (norm weights, sinks, mHC parameters, ape, router bias).
  std::vector<float> floats(const std::string& canonical) const;
  // An integer table (tid2eid) as int32.
  std::vector<int32_t> integers(const std::string& canonical) const;
  TensorView view(const std::string& canonical) const;
  const std::string& path() const { return checkpoint_.path(); }

 private:
  struct Entry {
    std::string stored_name;
    std::optional<ExpertSlice> slice;  // a part of one expert inside a fused stack
  };
  explicit Weights(Checkpoint checkpoint) : checkpoint_(std::move(checkpoint)) {}
  const Entry& entry(const std::string& canonical) const;

  Checkpoint checkpoint_;
  Quantization quantization_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace deepinfer::model

#pragma once
// The tensors a checkpoint of a given ModelConfig should contain, under DeepSeek's released names
// (shared/docs/v4_arch.md §3.2 for V4, §3.4 for V4.1), so `deepinfer inspect` and the loader can say
// what is missing, mis-shaped or unexpected.
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/model_config.h"

namespace deepinfer {

struct ExpectedTensor {
  std::string name;                    // e.g. "layers.3.attn.wq_a.weight", "layers.3.attn.wq_a.scale"
  std::vector<int64_t> logical_shape;  // the math shape ([out, in] for linears; scales: as stored)
  std::vector<DType> stored_dtypes;    // any of these is accepted; the first is what DeepSeek ships
  std::vector<int64_t> stored_shape;   // FP4 weights are [out, in/2]; everything else as logical
  bool optional = false;               // MTP / DSpark layers, and entries the docs are unsure of
  bool is_scale = false;               // a `.scale` companion of a quantized weight, not a parameter
  bool operator==(const ExpectedTensor&) const = default;
};

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// Product of logical_shape (for a weight: its parameter count).
int64_t logical_numel(const ExpectedTensor& tensor);

}  // namespace deepinfer

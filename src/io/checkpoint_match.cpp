#include "io/checkpoint_match.h"

#include <map>
#include <set>

#include "core/error.h"
#include "io/checkpoint_schema.h"
#include "io/tensor_names.h"

namespace deepinfer {
namespace {

bool dtype_allowed(const ExpectedTensor& expected, DType dtype) {
  for (DType allowed : expected.stored_dtypes)
    if (allowed == dtype) return true;
  return false;
}

std::string dtype_list(const ExpectedTensor& expected) {
  std::string out;
  for (DType dtype : expected.stored_dtypes) {
    if (!out.empty()) out += '|';
    out += dtype_name(dtype);
  }
  return out;
}

}  // namespace

CheckpointMatch match_checkpoint(const ModelConfig& config, const Checkpoint& checkpoint) {
  CheckpointMatch match;
  const std::vector<ExpectedTensor> schema = expected_tensors(config);
  std::map<std::string, const ExpectedTensor*> expected;
  for (const auto& tensor : schema) expected.emplace(tensor.name, &tensor);

  std::set<std::string> present;
  for (const auto& entry : checkpoint.tensors()) {
    const TensorInfo& info = *entry.info;
    StoredTensorMatch stored{info.name, "", info.dtype, info.shape, info.byte_size()};
    match.total_bytes += stored.bytes;
    const auto canonical = canonical_tensor_name(info.name);
    if (canonical && canonical->is_fused()) {
      // A transformers-style stack [experts, rows, cols] stands for one canonical tensor per expert.
      const int64_t experts = info.shape.empty() ? 0 : info.shape[0];
      for (const auto& part : canonical->fused_parts)
        for (int64_t e = 0; e < experts; ++e) present.insert(expert_part_name(part, e));
      int64_t numel = 1;
      for (int64_t d : info.shape) numel *= d;
      match.parameters += numel;
    } else if (canonical && expected.contains(canonical->name)) {
      const ExpectedTensor& want = *expected.at(canonical->name);
      stored.canonical_name = canonical->name;
      if (!present.insert(canonical->name).second) {
        match.mismatched.push_back(str_cat(info.name, ": a second tensor for ", canonical->name));
      } else if (!dtype_allowed(want, info.dtype) || info.shape != want.stored_shape) {
        match.mismatched.push_back(str_cat(info.name, ": ", dtype_name(info.dtype), " ", shape_string(info.shape),
                                           ", expected ", dtype_list(want), " ", shape_string(want.stored_shape)));
      } else if (!want.is_scale) {
        match.parameters += logical_numel(want);
      }
    } else {
      match.unexpected.push_back(str_cat(info.name, " (", dtype_name(info.dtype), " ", shape_string(info.shape), ")"));
    }
    match.tensors.push_back(std::move(stored));
  }
  for (const auto& tensor : schema) {
    if (present.contains(tensor.name)) continue;
    if (tensor.optional) {
      ++match.missing_optional;
    } else {
      match.missing.push_back(str_cat(tensor.name, " (", dtype_list(tensor), " ", shape_string(tensor.stored_shape), ")"));
    }
  }
  return match;
}

}  // namespace deepinfer

#pragma once
// Matches a checkpoint's stored tensors against the tensors its config expects: the loader and
// `deepinfer inspect` both need to know what is missing, mis-shaped or unexpected before any
// weight is read.
#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/model_config.h"

namespace deepinfer {

struct StoredTensorMatch {
  std::string stored_name;
  std::string canonical_name;  // empty when unknown, or for a fused expert stack (many canonicals)
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::size_t bytes = 0;
};

struct CheckpointMatch {
  std::vector<StoredTensorMatch> tensors;  // in the checkpoint's (name) order
  std::size_t total_bytes = 0;
  int64_t parameters = 0;               // logical parameters present (scales excluded, FP4 unpacked)
  std::vector<std::string> missing;     // required and absent, with the dtype and shape wanted
  std::size_t missing_optional = 0;     // e.g. MTP layers a checkpoint may leave out
  std::vector<std::string> mismatched;  // present with a dtype or shape the schema does not allow
  std::vector<std::string> unexpected;  // stored names the architecture has no place for
  bool complete() const { return missing.empty() && mismatched.empty(); }
};

CheckpointMatch match_checkpoint(const ModelConfig& config, const Checkpoint& checkpoint);

}  // namespace deepinfer

#pragma once
// The small V4 golden model (FP8 + FP4, 6 layers, vocabulary 512) the engine tests run, loaded once
// per test binary.
#include <string>

#include "model/model.h"

namespace deepinfer::engine::testing {

inline const model::Model& tiny_v4() {
  static const model::Model model = model::Model::load(std::string(DEEPINFER_TEST_DATA_DIR) + "/golden/v4/tiny_fp8");
  return model;
}

}  // namespace deepinfer::engine::testing

#pragma once
// The small V4 golden model (FP8 + FP4, 6 layers, vocabulary 512) the engine tests run, loaded once
// per test binary. DEEPINFER_TEST_DEVICE=cuda runs every engine test on that backend instead of
// the CPU (scripts/test-gpu.sh does); DEEPINFER_TEST_DATA_DIR overrides where the fixture is.
#include <cstdlib>
#include <string>

#include "backend/device.h"
#include "model/model.h"

namespace deepinfer::engine::testing {

inline const model::Model& tiny_v4() {
  static const model::Model model = [] {
    const char* data = std::getenv("DEEPINFER_TEST_DATA_DIR");
    model::Model loaded = model::Model::load(std::string(data && *data ? data : DEEPINFER_TEST_DATA_DIR) +
                                             "/golden/v4/tiny_fp8");
    if (const char* device = std::getenv("DEEPINFER_TEST_DEVICE"); device && *device)
      backend::attach_device(loaded, backend::parse_device(device));
    return loaded;
  }();
  return model;
}

}  // namespace deepinfer::engine::testing

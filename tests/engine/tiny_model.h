#pragma once
// The small V4 golden model (FP8 + FP4, 6 layers, vocabulary 512) the engine tests run, loaded once
// per test binary. DEEPINFER_TEST_DEVICE=cuda runs every engine test on that backend instead of
// the CPU (scripts/test-gpu.sh does), batch invariant, with CUDA graphs unless
// DEEPINFER_TEST_EAGER=1; DEEPINFER_TEST_DATA_DIR overrides where the fixture is.
#include <cstdlib>
#include <string>

#include "backend/device.h"
#include "engine/engine.h"
#include "model/model.h"

namespace deepinfer::engine::testing {

// Token ids the grammar tests give special roles in the tiny model's vocabulary.
inline constexpr int32_t kEos = 1;
inline constexpr int32_t kTrigger = 2;

// A small cache and batch, so preemption and chunking happen within a few requests.
inline EngineOptions small_options() {
  EngineOptions options;
  options.cache_memory_bytes = 64 << 20;
  options.block_tokens = 8;
  options.max_batch_tokens = 32;
  return options;
}

// A fresh copy of the tiny model on the CPU backend, for tests that set a backend of their own.
inline model::Model load_tiny_v4() {
  const char* data = std::getenv("DEEPINFER_TEST_DATA_DIR");
  return model::Model::load(std::string(data && *data ? data : DEEPINFER_TEST_DATA_DIR) + "/golden/v4/tiny_fp8");
}

// Moves `model` to the device DEEPINFER_TEST_DEVICE names, if any.
inline void attach_test_device(model::Model& model) {
  const char* device = std::getenv("DEEPINFER_TEST_DEVICE");
  if (!device || !*device) return;
  // The engine tests hold batch invariance to the bit, so the GPU runs them batch invariant;
  // DEEPINFER_TEST_EAGER=1 runs them without CUDA graphs.
  backend::DeviceSpec spec = backend::parse_device(device);
  spec.batch_invariant = true;
  const char* eager = std::getenv("DEEPINFER_TEST_EAGER");
  spec.cuda_graphs = !(eager && std::string(eager) == "1");
  backend::attach_device(model, spec);
}

inline const model::Model& tiny_v4() {
  static const model::Model model = [] {
    model::Model loaded = load_tiny_v4();
    attach_test_device(loaded);
    return loaded;
  }();
  return model;
}

inline model::Model load_tiny_dspark() {
  const char* data = std::getenv("DEEPINFER_TEST_DATA_DIR");
  return model::Model::load(std::string(data && *data ? data : DEEPINFER_TEST_DATA_DIR) + "/golden/v41/tiny_dspark");
}

// The small V4.1 model with a DSpark drafter (2 stages, blocks of 4, vocabulary 512, sliding
// window 8; random weights: its drafts are rarely the target's greedy tokens).
inline const model::Model& tiny_dspark() {
  static const model::Model model = [] {
    model::Model loaded = load_tiny_dspark();
    attach_test_device(loaded);
    return loaded;
  }();
  return model;
}

}  // namespace deepinfer::engine::testing

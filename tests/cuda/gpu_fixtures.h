#pragma once
// What the GPU tests share: where the fixtures are (the device machine's checkout is not where
// this one was built, so the environment may say), whether a CUDA device answers, and each golden
// fixture loaded twice, once per backend (the GPU's batch invariant: --batch-invariant).
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "backend/device.h"
#include "model/model.h"

namespace deepinfer::gpu_testing {

inline std::string from_environment(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}
inline std::string test_data_dir() { return from_environment("DEEPINFER_TEST_DATA_DIR", DEEPINFER_TEST_DATA_DIR); }
inline std::string asset_dir() { return from_environment("DEEPINFER_ASSET_DIR", DEEPINFER_ASSET_DIR); }

#define DEEPINFER_REQUIRE_GPU()                                                                   \
  do {                                                                                            \
    if (!::deepinfer::backend::cuda_device_present())                                             \
      GTEST_SKIP() << "no CUDA device answers here: GPU tests run on the device machine "         \
                      "(scripts/test-gpu.sh)";                                                    \
  } while (0)

struct FixturePair {
  std::unique_ptr<model::Model> cpu, gpu;
};

// family/name ("v4/tiny_fp8"): the same checkpoint on the CPU and on cuda:0.
inline const FixturePair& fixture_pair(const std::string& fixture) {
  static std::map<std::string, FixturePair> pairs;
  FixturePair& pair = pairs[fixture];
  if (!pair.cpu) {
    const std::string dir = test_data_dir() + "/golden/" + fixture;
    model::LoadOptions options;
    if (fixture.rfind("v41/", 0) == 0) options.tokenizer = asset_dir() + "/tokenizer/deepseek_v41_tokenizer.json";
    pair.cpu = std::make_unique<model::Model>(model::Model::load(dir, options));
    pair.gpu = std::make_unique<model::Model>(model::Model::load(dir, options));
    backend::DeviceSpec spec = backend::parse_device("cuda:0");
    spec.batch_invariant = true;  // the tests below hold batched rows to the bits of solo rows
    backend::attach_device(*pair.gpu, spec);
  }
  return pair;
}

}  // namespace deepinfer::gpu_testing

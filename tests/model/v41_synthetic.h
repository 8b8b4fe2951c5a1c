#pragma once
// Synthetic V4.1 checkpoints for tests: tests/data/configs/tiny_v41.json with an edit applied,
// random BF16 / F32 weights for every tensor the schema expects, in a scratch directory.
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/float_formats.h"
#include "io/checkpoint_schema.h"
#include "io/model_config.h"
#include "support/random_checkpoint.h"
#include "support/scratch_dir.h"

namespace deepinfer::model::test_support {

namespace fs = std::filesystem;

inline void write_synthetic(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  // The environment may say where tests/data is (the GPU tests run from another checkout).
  const char* data = std::getenv("DEEPINFER_TEST_DATA_DIR");
  std::ifstream in(std::string(data && *data ? data : DEEPINFER_TEST_DATA_DIR) + "/configs/tiny_v41.json");
  nlohmann::json document = nlohmann::json::parse(in);
  edit(document);
  std::ofstream(dir + "/config.json") << document.dump(2);
  deepinfer::test_support::write_random_checkpoint(dir);
}

inline void drop_engram(nlohmann::json& text) {
  for (auto it = text.begin(); it != text.end();) it = it.key().starts_with("engram_") ? text.erase(it) : std::next(it);
}

using deepinfer::test_support::ScratchDir;

inline std::vector<int32_t> prompt(int64_t length, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % (vocab - 8) + 3));
  return ids;
}

}  // namespace deepinfer::model::test_support

#pragma once
// Synthetic V4.1 checkpoints for tests: tests/data/configs/tiny_v41.json with an edit applied,
// random BF16 / F32 weights for every tensor the schema expects, in a scratch directory.
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/float_formats.h"
#include "io/checkpoint_schema.h"
#include "io/model_config.h"

namespace deepinfer::model::test_support {

namespace fs = std::filesystem;

inline uint16_t to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

// tiny_v41.json with `edit` applied, written to dir/config.json, plus a
// checkpoint of every required tensor: matrices ~ U(-1, 1) / sqrt(cols), norms ~ 1, small mHC
// and router parameters.
inline void write_synthetic(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  std::ifstream in(std::string(DEEPINFER_TEST_DATA_DIR) + "/configs/tiny_v41.json");
  nlohmann::json document = nlohmann::json::parse(in);
  edit(document);
  std::ofstream(dir + "/config.json") << document.dump(2);
  const ModelConfig config = load_model_config(dir);

  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto uniform = [&] {  // in [-1, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(static_cast<double>(state >> 11) / static_cast<double>(1ull << 52) - 1.0);
  };
  nlohmann::json header = nlohmann::json::object();
  std::vector<std::byte> data;
  for (const ExpectedTensor& tensor : expected_tensors(config)) {
    if (tensor.optional || tensor.is_scale) continue;
    const DType dtype = tensor.stored_dtypes.front();
    const int64_t count = logical_numel(tensor);
    const int64_t cols = tensor.logical_shape.back();
    const std::string& name = tensor.name;
    auto value = [&]() -> float {
      if (name.ends_with("norm.weight")) return 1.0f + 0.1f * uniform();
      if (name.ends_with("attn_sink")) return 0.5f * uniform();
      if (name.ends_with("_base") || name.ends_with("gate.bias")) return 0.1f * uniform();
      if (name.ends_with("_scale")) return 0.5f + 0.1f * uniform();
      if (name == "embed.weight") return uniform();
      return uniform() * 2.0f / std::sqrt(static_cast<float>(cols));
    };
    const std::size_t at = data.size();
    if (dtype == DType::F32) {
      data.resize(at + static_cast<std::size_t>(count) * 4);
      for (int64_t i = 0; i < count; ++i) {
        const float v = value();
        std::memcpy(data.data() + at + i * 4, &v, 4);
      }
    } else {
      ASSERT_EQ(dtype, DType::BF16) << name;
      data.resize(at + static_cast<std::size_t>(count) * 2);
      for (int64_t i = 0; i < count; ++i) {
        const uint16_t v = to_bf16(value());
        std::memcpy(data.data() + at + i * 2, &v, 2);
      }
    }
    header[name] = {{"dtype", std::string(dtype_name(dtype))},
                    {"shape", tensor.stored_shape},
                    {"data_offsets", {at, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream file(dir + "/model.safetensors", std::ios::binary);
  const uint64_t length = text.size();
  file.write(reinterpret_cast<const char*>(&length), sizeof(length));
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  file.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

inline void drop_engram(nlohmann::json& text) {
  for (auto it = text.begin(); it != text.end();) it = it.key().starts_with("engram_") ? text.erase(it) : std::next(it);
}

class ScratchDir {
 public:
  ScratchDir()
      : path_(fs::temp_directory_path() / ("deepinfer_v41_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

inline std::vector<int32_t> prompt(int64_t length, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % (vocab - 8) + 3));
  return ids;
}

}  // namespace deepinfer::model::test_support

#pragma once
// Writes a checkpoint of random weights for the config.json already in a folder: every required
// tensor of the config's schema, matrices ~ U(-1, 1) / sqrt(cols), norms ~ 1, small mHC and router
// parameters, tid2eid routing token t to experts t, t+1, ... Shared by the model tests and the
// forward-pass benchmark, which need models larger or other than the golden fixtures.
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/float_formats.h"
#include "io/checkpoint_schema.h"
#include "io/model_config.h"

namespace deepinfer::test_support {

inline void write_random_checkpoint(const std::string& dir) {
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
    const float spread = 2.0f / std::sqrt(static_cast<float>(tensor.logical_shape.back()));
    const std::string& name = tensor.name;
    auto value = [&]() -> float {
      if (name.ends_with("norm.weight")) return 1.0f + 0.1f * uniform();
      if (name.ends_with("attn_sink")) return 0.5f * uniform();
      if (name.ends_with("_base") || name.ends_with("gate.bias")) return 0.1f * uniform();
      if (name.ends_with("_scale")) return 0.5f + 0.1f * uniform();
      if (name == "embed.weight") return uniform();
      return uniform() * spread;
    };
    const std::size_t at = data.size();
    const std::size_t width = dtype_size(dtype);
    data.resize(at + static_cast<std::size_t>(count) * width);
    std::byte* out = data.data() + at;
    for (int64_t i = 0; i < count; ++i) {
      if (dtype == DType::F32) {
        const float v = value();
        std::memcpy(out + i * 4, &v, 4);
      } else if (dtype == DType::BF16) {
        const uint16_t v = float_to_bf16(value());
        std::memcpy(out + i * 2, &v, 2);
      } else if (name.ends_with("tid2eid")) {
        const int64_t k = tensor.logical_shape.back();
        const int64_t id = (i / k + i % k) % config.n_routed_experts;
        std::memcpy(out + i * width, &id, width);  // little endian: low bytes first
      } else {
        fail("write_random_checkpoint: no random values for ", name, " (", dtype_name(dtype), ")");
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
  if (!file) fail(dir, "/model.safetensors: write failed");
}

}  // namespace deepinfer::test_support

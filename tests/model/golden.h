#pragma once
// Reads a golden fixture (tests/data/golden/<family>/<name>/reference/golden.safetensors).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io/safetensors.h"
#include "model/model.h"

namespace deepinfer::model::testing {

inline std::string fixture_dir(const std::string& name, const std::string& family = "v4") {
  return std::string(DEEPINFER_TEST_DATA_DIR) + "/golden/" + family + "/" + name;
}

inline std::string v41_tokenizer() { return std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json"; }

// One loaded model per fixture for the whole test binary: building a V4.1 fixture's Engram token
// map from the tokenizer asset dominates a test under ASan, so every file shares it.
inline const Model& shared_fixture(const std::string& name, const std::string& family) {
  static std::map<std::string, std::unique_ptr<Model>> models;
  auto& slot = models[family + "/" + name];
  if (!slot) {
    LoadOptions options;
    if (family == "v41") options.tokenizer = v41_tokenizer();
    slot = std::make_unique<Model>(Model::load(fixture_dir(name, family), options));
  }
  return *slot;
}

class Golden {
 public:
  explicit Golden(const std::string& fixture, const std::string& family = "v4")
      : file_(SafetensorsFile::open(fixture_dir(fixture, family) + "/reference/golden.safetensors")) {}

  bool has(const std::string& name) const { return file_.find(name) != nullptr; }
  std::vector<int64_t> shape(const std::string& name) const { return file_.view(name).shape; }
  std::vector<float> floats(const std::string& name) const {
    const TensorView view = file_.view(name);
    std::vector<float> out(static_cast<std::size_t>(view.numel()));
    std::memcpy(out.data(), view.bytes.data(), out.size() * sizeof(float));
    return out;
  }
  std::vector<int64_t> integers(const std::string& name) const {
    const TensorView view = file_.view(name);
    std::vector<int64_t> out(static_cast<std::size_t>(view.numel()));
    std::memcpy(out.data(), view.bytes.data(), out.size() * sizeof(int64_t));
    return out;
  }
  std::vector<int32_t> int32s(const std::string& name) const {
    const TensorView view = file_.view(name);
    std::vector<int32_t> out(static_cast<std::size_t>(view.numel()));
    std::memcpy(out.data(), view.bytes.data(), out.size() * sizeof(int32_t));
    return out;
  }
  std::vector<int32_t> ids(const std::string& name) const {
    std::vector<int32_t> out;
    for (int64_t id : integers(name)) out.push_back(static_cast<int32_t>(id));
    return out;
  }

 private:
  SafetensorsFile file_;
};

// Runs `ids` through a fresh sequence in chunks of `chunk` tokens; returns all logits rows.
inline std::vector<float> run_chunked(const Model& model, const std::vector<int32_t>& ids, std::size_t chunk,
                                      ForwardTrace* last_trace = nullptr) {
  SequenceState sequence = model.new_sequence();
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  std::vector<float> logits(ids.size() * vocab);
  for (std::size_t begin = 0; begin < ids.size(); begin += chunk) {
    const std::size_t count = std::min(chunk, ids.size() - begin);
    model.forward(sequence, std::span(ids).subspan(begin, count), std::span(logits).subspan(begin * vocab, count * vocab),
                  LogitRows::All, last_trace);
  }
  EXPECT_EQ(sequence.length, static_cast<int64_t>(ids.size()));
  return logits;
}

inline float max_abs_diff(const float* a, const float* b, std::size_t n) {
  float worst = 0.0f;
  for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

}  // namespace deepinfer::model::testing

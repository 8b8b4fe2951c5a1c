// V4.1 on synthetic checkpoints built from tests/data/configs/tiny_v41.json (random BF16 / F32
// weights for every tensor the schema expects): chunked prefill and token-by-token decode give
// bit-identical logits to one-shot prefill, the CSA2 picks respect visibility and the candidate
// blocks, Reuse layers attend their index source's picks, images and an Engram model without its
// tokenizer are refused with clear errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/float_formats.h"
#include "io/checkpoint_schema.h"
#include "io/model_config.h"
#include "model/model.h"
#include "golden.h"
#include "v41_synthetic.h"

namespace deepinfer::model {
namespace {

using namespace test_support;
using testing::run_chunked;

struct Synthetic {
  ScratchDir dir;
  std::unique_ptr<Model> model;
};

// Plain: tiny_v41 without Engram (layers: SWA, Full r2, Full r1 + candidate source, Reindex r1).
// Reuse: layer 3 is no index source, so it attends layer 2's picks.
const Model& synthetic(const std::string& variant) {
  static std::map<std::string, std::unique_ptr<Synthetic>> models;
  auto& slot = models[variant];
  if (!slot) {
    slot = std::make_unique<Synthetic>();
    write_synthetic(slot->dir.str(), [&](nlohmann::json& document) {
      drop_engram(document["text_config"]);
      document["image_token_id"] = 500;
      if (variant == "reuse") document["text_config"]["index_source_layer_ids"] = {1, 2};
    });
    slot->model = std::make_unique<Model>(Model::load(slot->dir.str()));
  }
  return *slot->model;
}

class V41Test : public ::testing::TestWithParam<std::string> {};

TEST_P(V41Test, LoadsAsV41WithTheConfigRoles) {
  const Model& model = synthetic(GetParam());
  const ModelConfig& c = model.config();
  EXPECT_EQ(c.family, ModelFamily::V41);
  EXPECT_EQ(c.rms_norm_eps, 1e-20);
  EXPECT_EQ(c.num_hash_layers, 0);
  EXPECT_EQ(c.attention_kind(1), AttentionKind::SharedFull);
  EXPECT_EQ(c.attention_kind(3), GetParam() == "reuse" ? AttentionKind::SharedReuse : AttentionKind::SharedReindex);
}

TEST_P(V41Test, ChunkedPrefillAndDecodeAreBitIdenticalToOneShot) {
  const Model& model = synthetic(GetParam());
  const auto ids = prompt(40, model.vocab_size());
  const auto one_shot = run_chunked(model, ids, ids.size());
  for (float v : one_shot) ASSERT_TRUE(std::isfinite(v));
  for (std::size_t chunk : {1u, 2u, 5u, 13u}) {
    const auto chunked = run_chunked(model, ids, chunk);
    EXPECT_EQ(std::memcmp(chunked.data(), one_shot.data(), one_shot.size() * sizeof(float)), 0) << "chunk " << chunk;
  }
}

TEST_P(V41Test, PicksAreVisibleAndInsideTheCandidateBlocks) {
  const Model& model = synthetic(GetParam());
  const ModelConfig& c = model.config();
  const auto ids = prompt(40, model.vocab_size());
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits(ids.size() * static_cast<std::size_t>(model.vocab_size()));
  ForwardTrace trace;
  model.forward(sequence, ids, logits, LogitRows::All, &trace);
  ASSERT_EQ(trace.csa_topk.size(), 3u);  // layers 1, 2, 3
  bool some_full = false;
  for (std::size_t i = 0; i < 3; ++i) {
    const int64_t layer = static_cast<int64_t>(i) + 1;
    const int64_t ratio = c.compress_ratio(layer);
    for (int64_t t = 0; t < static_cast<int64_t>(ids.size()); ++t) {
      const auto& picks = trace.csa_topk[i][t];
      const int64_t visible = (t + 1) / ratio;
      const bool filtered = layer == 3 && GetParam() == "plain";
      if (filtered) {
        // Reindex after the candidate source: at most candidate_topk_blocks distinct blocks.
        std::set<int64_t> blocks;
        for (int64_t w : picks) blocks.insert(w / c.candidate_block_size);
        EXPECT_LE(static_cast<int64_t>(blocks.size()), c.candidate_topk_blocks) << "token " << t;
        EXPECT_LE(static_cast<int64_t>(picks.size()), std::min(c.index_topk, visible));
      } else if (layer == 3) {
        EXPECT_EQ(picks, trace.csa_topk[1][t]) << "Reuse attends its index source's picks, token " << t;
      } else {
        EXPECT_EQ(static_cast<int64_t>(picks.size()), std::min(c.index_topk, visible)) << "layer " << layer << " token " << t;
      }
      some_full |= static_cast<int64_t>(picks.size()) == c.index_topk;
      for (int64_t w : picks) EXPECT_LT(w, visible);
    }
  }
  EXPECT_TRUE(some_full);
}

INSTANTIATE_TEST_SUITE_P(Synthetic, V41Test, ::testing::Values("plain", "reuse"));

TEST(V41LoadTest, RefusesTheImageToken) {
  const Model& model = synthetic("plain");
  SequenceState sequence = model.new_sequence();
  const std::vector<int32_t> ids = {5, 500, 7};
  std::vector<float> logits(3 * static_cast<std::size_t>(model.vocab_size()));
  try {
    model.forward(sequence, ids, logits);
    FAIL() << "an image token was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("image"), std::string::npos) << error.what();
  }
  EXPECT_EQ(sequence.length, 0);
}

TEST(V41LoadTest, DecodeAfterPrefillMatchesOneShot) {
  const Model& model = synthetic("plain");
  const auto ids = prompt(45, model.vocab_size());
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  const auto one_shot = run_chunked(model, ids, ids.size());
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits(13 * vocab);
  model.forward(sequence, std::span(ids).first(13), logits);
  std::vector<float> last(vocab);
  for (std::size_t t = 13; t < ids.size(); ++t) {
    model.forward(sequence, std::span(ids).subspan(t, 1), last, LogitRows::Last);
    EXPECT_EQ(std::memcmp(last.data(), one_shot.data() + t * vocab, vocab * sizeof(float)), 0) << "token " << t;
  }
}

// Engram hashes compressed ids derived from the checkpoint's own tokenizer: without one the model
// cannot run, and load says so instead of running without its Engram layers.
TEST(V41LoadTest, AnEngramModelWithoutItsTokenizerIsRefused) {
  ScratchDir dir;
  write_synthetic(dir.str(), [](nlohmann::json&) {});
  try {
    (void)Model::load(dir.str());
    FAIL() << "a model with Engram layers loaded without a tokenizer";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("tokenizer"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace deepinfer::model

#include "io/checkpoint_match.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "io/checkpoint_schema.h"
#include "io/safetensors_writer.h"

namespace deepinfer {
namespace {

using test::TempDir;

const std::string kGolden = std::string(DEEPINFER_TEST_DATA_DIR) + "/golden/";
const std::string kConfigs = std::string(DEEPINFER_TEST_DATA_DIR) + "/configs/";

CheckpointMatch match_folder(const std::string& folder) {
  return match_checkpoint(load_model_config(folder), Checkpoint::open(folder));
}

bool any_contains(const std::vector<std::string>& items, const std::string& part) {
  return std::any_of(items.begin(), items.end(), [&](const std::string& item) { return test::contains(item, part); });
}

// The reference's own files (save_pretrained's spelling, and DeepSeek's release format with
// FP8/FP4 weights) hold exactly the tensors the schema asks for.
TEST(CheckpointMatch, GoldenFixturesAreComplete) {
  for (const char* fixture : {"v4/tiny_bf16", "v4/tiny_fp8", "v4/real_vocab", "v41/tiny_bf16", "v41/tiny_fp8"}) {
    SCOPED_TRACE(fixture);
    CheckpointMatch match = match_folder(kGolden + fixture);
    EXPECT_TRUE(match.missing.empty()) << match.missing.front();
    EXPECT_TRUE(match.mismatched.empty()) << match.mismatched.front();
    EXPECT_TRUE(match.unexpected.empty()) << match.unexpected.front();
    EXPECT_TRUE(match.complete());
  }
}

// The same architecture stored in BF16 and in FP8/FP4 has the same logical parameter count.
TEST(CheckpointMatch, QuantizedAndBf16CountTheSameParameters) {
  EXPECT_EQ(match_folder(kGolden + "v4/tiny_bf16").parameters, match_folder(kGolden + "v4/tiny_fp8").parameters);
  EXPECT_EQ(match_folder(kGolden + "v41/tiny_bf16").parameters, match_folder(kGolden + "v41/tiny_fp8").parameters);
}

class SchemaCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = load_model_config(kConfigs + "tiny_v4.json");
    for (const auto& tensor : expected_tensors(config_))
      if (!tensor.optional) specs_.push_back(test::tensor(tensor.name, std::string(dtype_name(tensor.stored_dtypes.front())), tensor.stored_shape));
  }
  CheckpointMatch write_and_match() {
    test::write_file(dir_.file("model.safetensors"), test::safetensors_file(specs_));
    return match_checkpoint(config_, Checkpoint::open(dir_.file("model.safetensors")));
  }
  TempDir dir_;
  ModelConfig config_;
  std::vector<test::TensorSpec> specs_;
};

TEST_F(SchemaCheckpoint, EveryRequiredTensorIsComplete) {
  CheckpointMatch match = write_and_match();
  EXPECT_TRUE(match.complete());
  EXPECT_TRUE(match.unexpected.empty());
  EXPECT_EQ(match.tensors.size(), specs_.size());
}

TEST_F(SchemaCheckpoint, MissingTensorIsNamed) {
  std::string dropped = specs_[specs_.size() / 2].name;
  specs_.erase(specs_.begin() + static_cast<std::ptrdiff_t>(specs_.size() / 2));
  CheckpointMatch match = write_and_match();
  EXPECT_FALSE(match.complete());
  ASSERT_EQ(match.missing.size(), 1u);
  EXPECT_TRUE(test::contains(match.missing[0], dropped)) << match.missing[0];
}

TEST_F(SchemaCheckpoint, WrongShapeAndDtypeAreNamed) {
  auto& wrong_shape = specs_[0];
  wrong_shape = test::tensor(wrong_shape.name, wrong_shape.dtype, {wrong_shape.shape[0] + 1});
  auto& wrong_dtype = specs_[1];
  wrong_dtype = test::tensor(wrong_dtype.name, "I32", wrong_dtype.shape);
  CheckpointMatch match = write_and_match();
  EXPECT_FALSE(match.complete());
  EXPECT_TRUE(any_contains(match.mismatched, specs_[0].name));
  EXPECT_TRUE(any_contains(match.mismatched, specs_[1].name + ": I32"));
}

TEST_F(SchemaCheckpoint, UnknownTensorIsUnexpectedButNotFatal) {
  specs_.push_back(test::tensor("layers.0.attn.not_a_weight", "F32", {3}));
  CheckpointMatch match = write_and_match();
  EXPECT_TRUE(match.complete());
  ASSERT_EQ(match.unexpected.size(), 1u);
  EXPECT_TRUE(test::contains(match.unexpected[0], "layers.0.attn.not_a_weight"));
}

TEST_F(SchemaCheckpoint, TwoSpellingsOfOneTensorAreReported) {
  // DeepSeek's and transformers' names for the same canonical tensor in one checkpoint.
  specs_.push_back(test::tensor("model.layers.0.attn.norm.weight", "BF16", {config_.head_dim}));
  CheckpointMatch match = write_and_match();
  EXPECT_FALSE(match.complete());
  EXPECT_TRUE(any_contains(match.mismatched, "a second tensor for layers.0.attn.kv_norm.weight"));
}

}  // namespace
}  // namespace deepinfer

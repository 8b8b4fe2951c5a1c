#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "io/safetensors_writer.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using test::contains;
using test::safetensors_file;
using test::tensor;

std::vector<std::byte> view_bytes(const TensorView& view) { return {view.bytes.begin(), view.bytes.end()}; }

class CheckpointTest : public ::testing::Test {
 protected:
  void write_shard(std::string_view name, const std::vector<test::TensorSpec>& tensors) {
    test::write_file(dir_.path() / name, safetensors_file(tensors));
  }
  void write_index(const json& weight_map, const json& metadata = json{{"total_size", 1234}}) {
    test::write_text(index_path(), json{{"metadata", metadata}, {"weight_map", weight_map}}.dump(2));
  }
  std::string index_path() const { return dir_.file("model.safetensors.index.json"); }

  // Opening the folder must fail with a message naming every part given.
  void expect_error(std::initializer_list<std::string_view> parts) {
    try {
      Checkpoint::open(dir_.path().string());
      ADD_FAILURE() << "inconsistent checkpoint was accepted";
    } catch (const Error& e) {
      for (auto part : parts) EXPECT_TRUE(contains(e.what(), part)) << "missing \"" << part << "\" in: " << e.what();
    }
  }

  // Three shards as a sharded Hugging Face checkpoint stores them, with the index.
  std::vector<std::pair<std::string, test::TensorSpec>> write_three_shards() {
    const std::vector<std::pair<std::string, test::TensorSpec>> layout = {
        {"model-00001-of-00003.safetensors", tensor("embed.weight", "BF16", {8, 4})},
        {"model-00001-of-00003.safetensors", tensor("layers.0.attn.wq", "F8_E4M3", {4, 4})},
        {"model-00002-of-00003.safetensors", tensor("layers.0.attn.wq_scale", "F8_E8M0", {1})},
        {"model-00002-of-00003.safetensors", tensor("layers.0.ffn.experts.0.w1", "I8", {4, 2})},
        {"model-00003-of-00003.safetensors", tensor("head.weight", "F32", {8, 4})},
        {"model-00003-of-00003.safetensors", tensor("norm.weight", "F32", {4})},
    };
    std::map<std::string, std::vector<test::TensorSpec>> by_shard;
    json weight_map = json::object();
    for (const auto& [shard, spec] : layout) {
      by_shard[shard].push_back(spec);
      weight_map[spec.name] = shard;
    }
    for (const auto& [shard, specs] : by_shard) write_shard(shard, specs);
    write_index(weight_map);
    return layout;
  }

  test::TempDir dir_;
};

TEST_F(CheckpointTest, ThreeShardsWithIndex) {
  const auto layout = write_three_shards();
  write_shard("consolidated.safetensors", {tensor("stray", "F32", {1})});  // not in the index: ignored

  const auto checkpoint = Checkpoint::open(dir_.path().string());
  EXPECT_EQ(checkpoint.shards().size(), 3u);
  EXPECT_EQ(checkpoint.index_metadata().at("total_size"), 1234);
  ASSERT_EQ(checkpoint.tensors().size(), layout.size());
  EXPECT_TRUE(std::is_sorted(checkpoint.tensors().begin(), checkpoint.tensors().end(),
                             [](const auto& a, const auto& b) { return a.info->name < b.info->name; }));
  for (const auto& [shard, spec] : layout) {
    const Checkpoint::Tensor* found = checkpoint.find(spec.name);
    ASSERT_NE(found, nullptr) << spec.name;
    EXPECT_EQ(found->shard->path(), dir_.file(shard));
    EXPECT_EQ(found->info->shape, spec.shape);
    EXPECT_EQ(dtype_name(found->info->dtype), spec.dtype);
    EXPECT_EQ(view_bytes(checkpoint.view(spec.name)), spec.data) << spec.name;
  }
  EXPECT_EQ(checkpoint.find("stray"), nullptr);
}

TEST_F(CheckpointTest, ViewsSurviveMovingTheCheckpoint) {
  write_three_shards();
  auto opened = Checkpoint::open(dir_.path().string());
  const auto* before = opened.view("norm.weight").bytes.data();
  const Checkpoint moved = std::move(opened);
  EXPECT_EQ(moved.view("norm.weight").bytes.data(), before);
  EXPECT_EQ(moved.find("norm.weight")->shard->path(), dir_.file("model-00003-of-00003.safetensors"));
}

TEST_F(CheckpointTest, FolderWithoutIndexUsesEverySafetensorsFile) {
  write_shard("b.safetensors", {tensor("second", "F16", {3})});
  write_shard("a.safetensors", {tensor("first", "F16", {2}), tensor("third", "U8", {5})});
  test::write_text(dir_.path() / "config.json", "{}");
  const auto checkpoint = Checkpoint::open(dir_.path().string());
  ASSERT_EQ(checkpoint.shards().size(), 2u);
  EXPECT_EQ(checkpoint.shards()[0].path(), dir_.file("a.safetensors"));
  EXPECT_EQ(checkpoint.shards()[1].path(), dir_.file("b.safetensors"));
  ASSERT_EQ(checkpoint.tensors().size(), 3u);
  EXPECT_EQ(checkpoint.find("second")->shard->path(), dir_.file("b.safetensors"));
  EXPECT_EQ(view_bytes(checkpoint.view("third")), tensor("third", "U8", {5}).data);
  EXPECT_TRUE(checkpoint.index_metadata().is_null());
}

TEST_F(CheckpointTest, SingleFilePath) {
  write_shard("only.safetensors", {tensor("w", "F32", {2, 2})});
  const auto checkpoint = Checkpoint::open(dir_.file("only.safetensors"));
  ASSERT_EQ(checkpoint.shards().size(), 1u);
  EXPECT_EQ(view_bytes(checkpoint.view("w")), tensor("w", "F32", {2, 2}).data);
}

TEST_F(CheckpointTest, AbsentTensorNamesCheckpointAndTensor) {
  write_three_shards();
  const auto checkpoint = Checkpoint::open(dir_.path().string());
  try {
    checkpoint.view("layers.9.missing");
    ADD_FAILURE() << "view of an absent tensor succeeded";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), dir_.path().string())) << e.what();
    EXPECT_TRUE(contains(e.what(), "'layers.9.missing'")) << e.what();
  }
}

TEST_F(CheckpointTest, IndexNamesMissingShard) {
  write_shard("a.safetensors", {tensor("w", "F32", {1})});
  write_index({{"w", "a.safetensors"}, {"v", "gone.safetensors"}});
  expect_error({index_path(), "'gone.safetensors'", "'v'", "missing"});
}

TEST_F(CheckpointTest, IndexPlacesTensorInShardThatLacksIt) {
  write_shard("a.safetensors", {tensor("w", "F32", {1})});
  write_index({{"w", "a.safetensors"}, {"v", "a.safetensors"}});
  expect_error({index_path(), "'v'", "'a.safetensors'", "no such tensor"});
}

TEST_F(CheckpointTest, IndexPlacesTensorInTheWrongShard) {
  write_shard("a.safetensors", {tensor("w", "F32", {1})});
  write_shard("b.safetensors", {tensor("v", "F32", {1})});
  write_index({{"w", "b.safetensors"}, {"v", "a.safetensors"}});
  expect_error({index_path(), "'a.safetensors'", "'b.safetensors'"});
}

TEST_F(CheckpointTest, ShardHoldsTensorTheIndexDoesNotList) {
  write_shard("a.safetensors", {tensor("w", "F32", {1}), tensor("extra", "F32", {1})});
  write_index({{"w", "a.safetensors"}});
  expect_error({index_path(), "'a.safetensors'", "'extra'", "does not list"});
}

TEST_F(CheckpointTest, SameTensorInTwoShards) {
  write_shard("a.safetensors", {tensor("w", "F32", {1})});
  write_shard("b.safetensors", {tensor("w", "F32", {1})});
  expect_error({"'w'", dir_.file("a.safetensors"), dir_.file("b.safetensors")});
  write_index({{"w", "a.safetensors"}, {"v", "b.safetensors"}});
  write_shard("b.safetensors", {tensor("w", "F32", {1}), tensor("v", "F32", {1})});
  expect_error({"'w'", dir_.file("a.safetensors"), dir_.file("b.safetensors")});
}

TEST_F(CheckpointTest, ShardPathEscapingTheFolder) {
  write_shard("a.safetensors", {tensor("w", "F32", {1})});
  for (const char* escape : {"../a.safetensors", "sub/../../a.safetensors", "/etc/passwd", ""}) {
    SCOPED_TRACE(escape);
    write_index({{"w", escape}});
    expect_error({index_path(), "'w'", "not inside the checkpoint folder"});
  }
}

TEST_F(CheckpointTest, ShardInSubfolderIsInside) {
  std::filesystem::create_directory(dir_.path() / "shards");
  write_shard("shards/a.safetensors", {tensor("w", "F32", {1})});
  write_index({{"w", "shards/./a.safetensors"}});
  EXPECT_EQ(Checkpoint::open(dir_.path().string()).find("w")->shard->path(), dir_.file("shards/a.safetensors"));
}

TEST_F(CheckpointTest, MalformedIndex) {
  write_shard("a.safetensors", {tensor("w", "F32", {1})});
  test::write_text(index_path(), R"({"weight_map": {"w": "a.safetensors")");
  expect_error({index_path(), "invalid JSON"});
  test::write_text(index_path(), R"({"metadata": {"total_size": 1e400}, "weight_map": {"w": "a.safetensors"}})");
  expect_error({index_path(), "invalid JSON", "1e400"});
  test::write_text(index_path(), R"({"metadata": {}})");
  expect_error({index_path(), "missing \"weight_map\""});
  test::write_text(index_path(), R"({"weight_map": {"w": 3}})");
  expect_error({index_path(), "'w'", "number"});
  test::write_text(index_path(), R"({"weight_map": {"w": "a.safetensors"}, "metadata": "x"})");
  expect_error({index_path(), "\"metadata\""});
}

TEST_F(CheckpointTest, CorruptShardIsNamed) {
  write_shard("a.safetensors", {tensor("w", "F32", {1})});
  test::write_file(dir_.path() / "b.safetensors", test::raw_file(R"({"v":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4));
  expect_error({dir_.file("b.safetensors"), "'v'", "8 bytes"});
}

TEST_F(CheckpointTest, FolderWithoutSafetensors) {
  test::write_text(dir_.path() / "config.json", "{}");
  expect_error({dir_.path().string(), "no .safetensors"});
}

TEST_F(CheckpointTest, MissingPathAndEmptyFile) {
  const std::string absent = dir_.file("nothing-here");
  try {
    Checkpoint::open(absent);
    ADD_FAILURE() << "opened a path that does not exist";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), absent)) << e.what();
  }
  const std::string empty = dir_.file("empty.safetensors");
  test::write_file(empty, {});
  try {
    Checkpoint::open(empty);
    ADD_FAILURE() << "opened a 0-byte file";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), empty)) << e.what();
    EXPECT_TRUE(contains(e.what(), "0 bytes")) << e.what();
  }
}

}  // namespace
}  // namespace deepinfer

// Loading: a checkpoint missing a tensor is refused by name; MTP weights (mtp.*) are loaded and
// kept when present. The checkpoints here are edited copies of the golden fixtures.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "golden.h"
#include "support/scratch_dir.h"
#include "io/checkpoint.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;

struct StoredTensor {
  std::string name;
  TensorInfo info;
  std::vector<std::byte> bytes;
};

// Every tensor of a checkpoint folder, bytes copied.
std::vector<StoredTensor> read_all(const std::string& dir) {
  const Checkpoint checkpoint = Checkpoint::open(dir);
  std::vector<StoredTensor> out;
  for (const auto& tensor : checkpoint.tensors()) {
    const TensorView view = checkpoint.view(tensor.info->name);
    out.push_back({tensor.info->name, *tensor.info, std::vector<std::byte>(view.bytes.begin(), view.bytes.end())});
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<StoredTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", std::string(dtype_name(t.info.dtype))},
                      {"shape", t.info.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream file(path, std::ios::binary);
  const uint64_t length = text.size();
  file.write(reinterpret_cast<const char*>(&length), sizeof(length));
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : tensors) file.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

using deepinfer::test_support::ScratchDir;

TEST(ModelLoadTest, RefusesACheckpointMissingATensorByName) {
  const std::string source = testing::fixture_dir("tiny_bf16");
  ScratchDir dir;
  fs::copy_file(source + "/config.json", dir.str() + "/config.json");
  auto tensors = read_all(source);
  const std::string dropped = "model.layers.2.attn.compressor.position_bias";
  const auto before = tensors.size();
  std::erase_if(tensors, [&](const StoredTensor& t) { return t.name == "model.layers.2.attn.compressor.ape" || t.name == dropped; });
  ASSERT_EQ(tensors.size(), before - 1) << "the fixture should hold layer 2's compressor ape";
  write_safetensors(dir.str() + "/model.safetensors", tensors);
  try {
    (void)Model::load(dir.str());
    FAIL() << "an incomplete checkpoint loaded";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("layers.2.attn.compressor.ape"), std::string::npos) << error.what();
  }
}

// tiny_fp8 with one MTP layer appended: its block reuses layer 3's attention (minus the
// compressor: MTP layers are window-only) and MoE, e_proj / h_proj reuse an FP8 [64, 64] matrix.
void write_fp8_with_mtp(const std::string& dir, bool with_mtp_tensors) {
  const std::string source = testing::fixture_dir("tiny_fp8");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(source + "/config.json"));
  config["num_nextn_predict_layers"] = 1;
  config["compress_ratios"].push_back(0);
  std::ofstream(dir + "/config.json") << config.dump(2);
  auto tensors = read_all(source);
  if (with_mtp_tensors) {
    std::vector<StoredTensor> extra;
    auto copy_as = [&](const std::string& from, const std::string& to) {
      for (const auto& t : tensors)
        if (t.name == from) extra.push_back({to, t.info, t.bytes});
    };
    for (const auto& t : tensors) {
      if (!t.name.starts_with("layers.3.") || t.name.starts_with("layers.3.attn.compressor.")) continue;
      extra.push_back({"mtp.0." + t.name.substr(std::strlen("layers.3.")), t.info, t.bytes});
    }
    for (const std::string projection : {"e_proj", "h_proj"}) {
      copy_as("layers.3.attn.wo_b.weight", "mtp.0." + projection + ".weight");
      copy_as("layers.3.attn.wo_b.scale", "mtp.0." + projection + ".scale");
    }
    for (const std::string norm : {"enorm", "hnorm", "norm"}) copy_as("norm.weight", "mtp.0." + norm + ".weight");
    for (const std::string part : {"fn", "base", "scale"}) copy_as("hc_head_" + part, "mtp.0.hc_head_" + part);
    tensors.insert(tensors.end(), extra.begin(), extra.end());
  }
  write_safetensors(dir + "/model.safetensors", tensors);
}

TEST(ModelLoadTest, KeepsMtpWeightsWhenPresent) {
  ScratchDir dir;
  write_fp8_with_mtp(dir.str(), /*with_mtp_tensors=*/true);
  const Model model = Model::load(dir.str());
  ASSERT_EQ(model.mtp().size(), 1u);
  const MtpWeights& mtp = model.mtp()[0];
  EXPECT_EQ(mtp.e_proj.encoding, kernels::WeightEncoding::FP8_E4M3);
  EXPECT_EQ(mtp.e_proj.rows, 64);
  EXPECT_EQ(mtp.block.attention.ratio, 0);
  EXPECT_FALSE(mtp.block.attention.compressor);
  EXPECT_TRUE(mtp.block.moe.tid2eid.empty());  // a top-k router, not a hash layer
  EXPECT_EQ(mtp.block.moe.experts.size(), 8u);

  // The decoder is unchanged by the extra block.
  const testing::Golden golden("tiny_fp8");
  const auto ids = golden.ids("input_ids");
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits(ids.size() * static_cast<std::size_t>(model.vocab_size()));
  model.forward(sequence, ids, logits);
  const auto want = golden.floats("causal_logits");
  EXPECT_LE(testing::max_abs_diff(logits.data(), want.data(), want.size()), 1e-4f);
}

TEST(ModelLoadTest, LoadsWithoutTheOptionalMtpLayer) {
  ScratchDir dir;
  write_fp8_with_mtp(dir.str(), /*with_mtp_tensors=*/false);
  EXPECT_TRUE(Model::load(dir.str()).mtp().empty());
}

}  // namespace
}  // namespace deepinfer::model

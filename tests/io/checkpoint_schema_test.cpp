#include "io/checkpoint_schema.h"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <unordered_map>
#include <string>

#include "io/json_file.h"

namespace deepinfer {
namespace {

using nlohmann::json;

ModelConfig config(const std::string& name) {
  return load_model_config(std::string(DEEPINFER_TEST_DATA_DIR) + "/configs/" + name);
}

using TensorIndex = std::unordered_map<std::string, const ExpectedTensor*>;

TensorIndex index_of(const std::vector<ExpectedTensor>& tensors) {
  TensorIndex result;
  for (const ExpectedTensor& t : tensors) EXPECT_TRUE(result.emplace(t.name, &t).second) << "duplicate " << t.name;
  return result;
}

// The release-sized schemas have ~10^5 entries; build each once for the whole file.
const std::vector<ExpectedTensor>& release_tensors(const std::string& name) {
  static std::map<std::string, std::vector<ExpectedTensor>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, expected_tensors(config(name))).first;
  return it->second;
}

const TensorIndex& release_index(const std::string& name) {
  static std::map<std::string, TensorIndex> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, index_of(release_tensors(name))).first;
  return it->second;
}

const ExpectedTensor& at(const TensorIndex& index, const std::string& name) {
  auto it = index.find(name);
  if (it == index.end()) throw std::runtime_error("no expected tensor " + name);
  return *it->second;
}

struct Row {
  std::string name;
  std::vector<int64_t> stored_shape;
  DType dtype;
};

// The V4-Flash table of shared/docs/v4_arch.md §3.2 (layer 2 = CSA, 3 = HCA, 0 = hash layer).
const Row kV4FlashTable[] = {
    {"embed.weight", {129280, 4096}, DType::BF16},
    {"head.weight", {129280, 4096}, DType::BF16},
    {"norm.weight", {4096}, DType::BF16},
    {"hc_head_fn", {4, 16384}, DType::F32},
    {"hc_head_base", {4}, DType::F32},
    {"hc_head_scale", {1}, DType::F32},
    {"layers.2.attn_norm.weight", {4096}, DType::BF16},
    {"layers.2.ffn_norm.weight", {4096}, DType::BF16},
    {"layers.2.hc_attn_fn", {24, 16384}, DType::F32},
    {"layers.2.hc_ffn_fn", {24, 16384}, DType::F32},
    {"layers.2.hc_attn_base", {24}, DType::F32},
    {"layers.2.hc_ffn_scale", {3}, DType::F32},
    {"layers.2.attn.wq_a.weight", {1024, 4096}, DType::F8_E4M3},
    {"layers.2.attn.wq_a.scale", {8, 32}, DType::F8_E8M0},
    {"layers.2.attn.q_norm.weight", {1024}, DType::BF16},
    {"layers.2.attn.wq_b.weight", {32768, 1024}, DType::F8_E4M3},
    {"layers.2.attn.wq_b.scale", {256, 8}, DType::F8_E8M0},
    {"layers.2.attn.wkv.weight", {512, 4096}, DType::F8_E4M3},
    {"layers.2.attn.wkv.scale", {4, 32}, DType::F8_E8M0},
    {"layers.2.attn.kv_norm.weight", {512}, DType::BF16},
    {"layers.2.attn.wo_a.weight", {8192, 4096}, DType::F8_E4M3},
    {"layers.2.attn.wo_a.scale", {64, 32}, DType::F8_E8M0},
    {"layers.2.attn.wo_b.weight", {4096, 8192}, DType::F8_E4M3},
    {"layers.2.attn.wo_b.scale", {32, 64}, DType::F8_E8M0},
    {"layers.2.attn.attn_sink", {64}, DType::F32},
    {"layers.2.attn.compressor.wkv.weight", {1024, 4096}, DType::BF16},
    {"layers.2.attn.compressor.wgate.weight", {1024, 4096}, DType::BF16},
    {"layers.3.attn.compressor.wkv.weight", {512, 4096}, DType::BF16},
    {"layers.2.attn.compressor.ape", {4, 1024}, DType::F32},
    {"layers.3.attn.compressor.ape", {128, 512}, DType::F32},
    {"layers.2.attn.compressor.norm.weight", {512}, DType::BF16},
    {"layers.2.attn.indexer.wq_b.weight", {8192, 1024}, DType::F8_E4M3},
    {"layers.2.attn.indexer.wq_b.scale", {64, 8}, DType::F8_E8M0},
    {"layers.2.attn.indexer.weights_proj.weight", {64, 4096}, DType::BF16},
    {"layers.2.attn.indexer.compressor.wkv.weight", {256, 4096}, DType::BF16},
    {"layers.2.attn.indexer.compressor.wgate.weight", {256, 4096}, DType::BF16},
    {"layers.2.attn.indexer.compressor.ape", {4, 256}, DType::F32},
    {"layers.2.attn.indexer.compressor.norm.weight", {128}, DType::BF16},
    {"layers.2.ffn.gate.weight", {256, 4096}, DType::BF16},
    {"layers.3.ffn.gate.bias", {256}, DType::F32},
    {"layers.0.ffn.gate.tid2eid", {129280, 6}, DType::I64},
    {"layers.2.ffn.experts.0.w1.weight", {2048, 2048}, DType::I8},
    {"layers.2.ffn.experts.0.w1.scale", {2048, 128}, DType::F8_E8M0},
    {"layers.2.ffn.experts.255.w3.weight", {2048, 2048}, DType::I8},
    {"layers.2.ffn.experts.7.w2.weight", {4096, 1024}, DType::I8},
    {"layers.2.ffn.experts.7.w2.scale", {4096, 64}, DType::F8_E8M0},
    {"layers.2.ffn.shared_experts.w1.weight", {2048, 4096}, DType::F8_E4M3},
    {"layers.2.ffn.shared_experts.w1.scale", {16, 32}, DType::F8_E8M0},
    {"layers.2.ffn.shared_experts.w2.weight", {4096, 2048}, DType::F8_E4M3},
    {"layers.2.ffn.shared_experts.w2.scale", {32, 16}, DType::F8_E8M0},
    {"mtp.0.e_proj.weight", {4096, 4096}, DType::F8_E4M3},
    {"mtp.0.h_proj.weight", {4096, 4096}, DType::F8_E4M3},
    {"mtp.0.enorm.weight", {4096}, DType::BF16},
    {"mtp.0.hc_head_fn", {4, 16384}, DType::F32},
};

TEST(CheckpointSchema, V4FlashMatchesTheDocumentedTable) {
  const TensorIndex& tensors = release_index("v4_flash.json");
  for (const Row& row : kV4FlashTable) {
    auto it = tensors.find(row.name);
    ASSERT_NE(it, tensors.end()) << row.name;
    EXPECT_EQ(it->second->stored_shape, row.stored_shape) << row.name;
    ASSERT_FALSE(it->second->stored_dtypes.empty()) << row.name;
    EXPECT_EQ(it->second->stored_dtypes.front(), row.dtype) << row.name;
  }
  EXPECT_EQ(at(tensors, "layers.2.ffn.experts.0.w1.weight").logical_shape, (std::vector<int64_t>{2048, 4096}));
  // Hash layers have no bias, later layers no tid2eid; HCA layers have no indexer and no wgate overlap.
  EXPECT_EQ(tensors.count("layers.0.ffn.gate.bias"), 0u);
  EXPECT_EQ(tensors.count("layers.3.ffn.gate.tid2eid"), 0u);
  EXPECT_EQ(tensors.count("layers.3.attn.indexer.wq_b.weight"), 0u);
  EXPECT_EQ(tensors.count("layers.1.attn.compressor.wkv.weight"), 0u);
  EXPECT_EQ(tensors.count("layers.43.attn_norm.weight"), 0u);
  EXPECT_EQ(tensors.count("layers.2.ffn.experts.256.w1.weight"), 0u);
  EXPECT_EQ(tensors.count("mtp.0.attn.compressor.wkv.weight"), 0u);  // MTP layer is window-only
  EXPECT_EQ(tensors.count("mtp.0.ffn.gate.bias"), 1u);
}

// Parameter totals over logical shapes, scales excluded.
struct Totals {
  double main = 0, mtp = 0, engram_tables = 0;
};

Totals totals(const std::vector<ExpectedTensor>& tensors) {
  Totals t;
  for (const ExpectedTensor& tensor : tensors) {
    if (tensor.is_scale) continue;
    double n = static_cast<double>(logical_numel(tensor));
    if (tensor.name.rfind("mtp.", 0) == 0) t.mtp += n;
    else if (tensor.name.find(".engram.embed.") != std::string::npos) t.engram_tables += n;
    else t.main += n;
  }
  return t;
}

TEST(CheckpointSchema, V4FlashParameterCount) {
  // v4_arch.md: 284.3B + 6.6B MTP (DERIVED there from the module definitions).
  Totals t = totals(release_tensors("v4_flash.json"));
  EXPECT_NEAR(t.main / 1e9, 284.3, 0.05);
  EXPECT_NEAR(t.mtp / 1e9, 6.6, 0.05);
  EXPECT_EQ(t.engram_tables, 0);
}

TEST(CheckpointSchema, V41FlashParameterCount) {
  // v4_arch.md §1.3: 551.9B without the Engram tables, which hold 196.6B.
  Totals t = totals(release_tensors("v41_flash.json"));
  EXPECT_NEAR(t.main / 1e9, 551.9, 0.05);
  EXPECT_NEAR(t.engram_tables / 1e9, 196.6, 0.05);
}

TEST(CheckpointSchema, V41LayerRoles) {
  const TensorIndex& tensors = release_index("v41_flash.json");
  EXPECT_EQ(at(tensors, "layers.2.attn.wq_a.weight").stored_shape, (std::vector<int64_t>{1280, 5120}));
  EXPECT_EQ(at(tensors, "layers.2.attn.wq_a.scale").stored_shape, (std::vector<int64_t>{40, 160}));  // 32x32 tiles
  EXPECT_EQ(at(tensors, "layers.2.attn.wo_a.weight").stored_shape, (std::vector<int64_t>{8192, 4096}));
  EXPECT_EQ(at(tensors, "layers.2.attn.wo_b.weight").stored_shape, (std::vector<int64_t>{5120, 8192}));
  EXPECT_EQ(at(tensors, "layers.2.attn.compressor.wgate.weight").stored_shape, (std::vector<int64_t>{512, 5120}));
  EXPECT_EQ(at(tensors, "layers.20.attn.compressor.wkv.weight").stored_shape, (std::vector<int64_t>{512, 5120}));
  EXPECT_EQ(tensors.count("layers.20.attn.compressor.wgate.weight"), 0u);  // ratio 1: no gate
  EXPECT_EQ(at(tensors, "layers.8.attn.indexer.wk.weight").stored_shape, (std::vector<int64_t>{128, 512}));
  EXPECT_EQ(at(tensors, "layers.24.attn.indexer.wq_b.weight").stored_shape, (std::vector<int64_t>{4096, 1280}));
  EXPECT_EQ(at(tensors, "layers.24.attn.indexer.weights_proj.weight").stored_shape, (std::vector<int64_t>{32, 5120}));
  EXPECT_EQ(tensors.count("layers.24.attn.compressor.wkv.weight"), 0u);  // reindex: reuses layer 20's KV
  EXPECT_EQ(tensors.count("layers.25.attn.indexer.wq_b.weight"), 0u);    // reuse: nothing of its own
  EXPECT_EQ(tensors.count("layers.25.attn.compressor.wkv.weight"), 0u);
  EXPECT_EQ(tensors.count("hc_head_fn"), 0u);
  EXPECT_EQ(tensors.count("layers.0.ffn.gate.tid2eid"), 0u);
  EXPECT_EQ(at(tensors, "layers.0.hc_attn_fn").stored_shape, (std::vector<int64_t>{24, 20480}));
  EXPECT_EQ(at(tensors, "layers.5.ffn.experts.383.w2.weight").stored_shape, (std::vector<int64_t>{5120, 1152}));
  EXPECT_EQ(at(tensors, "layers.14.engram.embed.weight").stored_shape, (std::vector<int64_t>{384016682, 256}));
  EXPECT_EQ(at(tensors, "layers.14.engram.embed.scale").stored_shape, (std::vector<int64_t>{384016682, 8}));
  EXPECT_EQ(at(tensors, "layers.1.engram.wkv.weight").stored_shape, (std::vector<int64_t>{25600, 6144}));
  EXPECT_EQ(at(tensors, "layers.1.engram.q_weight").stored_shape, (std::vector<int64_t>{4, 5120}));
  EXPECT_EQ(tensors.count("layers.2.engram.wkv.weight"), 0u);
  // DSpark layers: window-only blocks with their own 128 experts.
  EXPECT_TRUE(tensors.count("mtp.2.ffn.experts.127.w1.weight"));
  EXPECT_EQ(tensors.count("mtp.2.ffn.experts.128.w1.weight"), 0u);
  EXPECT_TRUE(at(tensors, "mtp.0.attn.wq_a.weight").optional);
}

TEST(CheckpointSchema, OptionalOnlyWhereDocumented) {
  for (const char* name : {"v4_flash.json", "v41_flash.json"}) {
    for (const ExpectedTensor& t : release_tensors(name)) {
      bool mtp = t.name.rfind("mtp.", 0) == 0;
      bool uncertain = t.name.find(".engram.") != std::string::npos || t.name.find("gate.bias_vl") != std::string::npos ||
                       (t.is_scale && t.stored_dtypes.size() == 1 && name == std::string("v41_flash.json") &&
                        (t.name.find("compressor.") != std::string::npos || t.name.find("indexer.wk.") != std::string::npos));
      if (mtp) EXPECT_TRUE(t.optional) << t.name;
      else EXPECT_EQ(t.optional, uncertain) << t.name;
    }
  }
}

TEST(CheckpointSchema, UnquantizedCheckpointHasNoScales) {
  for (const char* name : {"tiny_v4.json", "tiny_v41.json"}) {
    ModelConfig c = config(name);
    auto tensors = expected_tensors(c);
    EXPECT_FALSE(tensors.empty());
    for (const ExpectedTensor& t : tensors) {
      // The one exception: transformers writes the unused, optional Engram table scale in float.
      if (t.name.ends_with("engram.embed.scale")) {
        EXPECT_TRUE(t.optional && t.is_scale) << t.name;
        continue;
      }
      EXPECT_FALSE(t.is_scale) << t.name;
      EXPECT_EQ(t.logical_shape, t.stored_shape) << t.name;
      for (DType d : t.stored_dtypes) EXPECT_NE(d, DType::F8_E4M3) << t.name;
    }
    TensorIndex named = index_of(tensors);
    EXPECT_EQ(at(named, "layers.0.attn.wq_a.weight").stored_dtypes, (std::vector<DType>{DType::BF16, DType::F32}));
    EXPECT_EQ(at(named, "layers.1.ffn.experts.7.w2.weight").stored_shape, (std::vector<int64_t>{64, 32}));
  }
  auto v4_tensors = expected_tensors(config("tiny_v4.json"));
  TensorIndex v4 = index_of(v4_tensors);
  EXPECT_EQ(at(v4, "layers.0.ffn.gate.tid2eid").stored_shape, (std::vector<int64_t>{512, 2}));
  EXPECT_EQ(at(v4, "layers.1.attn.compressor.ape").stored_shape, (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(at(v4, "layers.2.attn.compressor.ape").stored_shape, (std::vector<int64_t>{128, 32}));
  EXPECT_EQ(at(v4, "layers.1.attn.wo_a.weight").stored_shape, (std::vector<int64_t>{64, 64}));
  auto v41_tensors = expected_tensors(config("tiny_v41.json"));
  TensorIndex v41 = index_of(v41_tensors);
  EXPECT_EQ(at(v41, "layers.1.engram.embed.weight").stored_shape, (std::vector<int64_t>{1000, 16}));
  EXPECT_EQ(at(v41, "layers.1.engram.wkv.weight").stored_shape, (std::vector<int64_t>{320, 64}));  // 5*64, 2*2*16
}

// docs/MODELS.md, "DSpark drafter": tap fusion on the first stage, the heads on the last, all
// optional (a checkpoint may leave the drafter out), the Markov tables under either spelling.
TEST(CheckpointSchema, DsparkDrafterTensors) {
  const ModelConfig c = config("v41_flash.json");
  ASSERT_TRUE(c.dspark.has_value());
  ASSERT_EQ(c.num_mtp_layers, 3);
  auto tensors = expected_tensors(c);
  TensorIndex named = index_of(tensors);
  const ExpectedTensor& fusion = at(named, "mtp.0.main_proj.weight");
  EXPECT_EQ(fusion.logical_shape, (std::vector<int64_t>{5120, 3 * 5120}));
  EXPECT_EQ(fusion.stored_dtypes, (std::vector<DType>{DType::F8_E4M3}));
  EXPECT_TRUE(fusion.optional);
  EXPECT_EQ(at(named, "mtp.0.main_proj.scale").stored_shape, (std::vector<int64_t>{160, 480}));
  EXPECT_EQ(at(named, "mtp.0.main_norm.weight").logical_shape, (std::vector<int64_t>{5120}));
  for (const char* table : {"markov_w1", "markov_w2", "embed", "head"}) {
    const ExpectedTensor& markov = at(named, std::string("mtp.2.markov_head.") + table + ".weight");
    EXPECT_EQ(markov.logical_shape, (std::vector<int64_t>{129280, 256})) << table;
    EXPECT_TRUE(markov.optional) << table;
  }
  EXPECT_EQ(at(named, "mtp.2.confidence_head.proj.weight").logical_shape, (std::vector<int64_t>{1, 5120 + 256}));
  EXPECT_EQ(at(named, "mtp.2.norm.weight").logical_shape, (std::vector<int64_t>{5120}));
  // Only where they belong, and V4.1 has no hyper-head.
  EXPECT_FALSE(named.contains("mtp.1.main_proj.weight"));
  EXPECT_FALSE(named.contains("mtp.0.markov_head.markov_w1.weight"));
  EXPECT_FALSE(named.contains("mtp.2.hc_head_fn"));
}

TEST(CheckpointSchema, Fp8ExpertsAndTiedEmbeddings) {
  // No expert_dtype under a quantization_config: experts are FP8 like the dense weights.
  json document = read_json_file(std::string(DEEPINFER_TEST_DATA_DIR) + "/configs/tiny_v4.json");
  document["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {16, 16}}};
  document["tie_word_embeddings"] = true;
  auto tensors = expected_tensors(parse_model_config(document, "fp8 experts"));
  TensorIndex index = index_of(tensors);
  EXPECT_EQ(index.count("head.weight"), 0u);
  EXPECT_EQ(at(index, "layers.3.ffn.experts.3.w1.weight").stored_shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(at(index, "layers.3.ffn.experts.3.w1.weight").stored_dtypes, (std::vector<DType>{DType::F8_E4M3}));
  EXPECT_EQ(at(index, "layers.3.ffn.experts.3.w1.scale").stored_shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(at(index, "layers.3.ffn.experts.3.w2.scale").stored_shape, (std::vector<int64_t>{4, 2}));
}

}  // namespace
}  // namespace deepinfer

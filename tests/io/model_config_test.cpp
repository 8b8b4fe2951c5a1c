#include "io/model_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "core/error.h"
#include "io/json_file.h"

namespace deepinfer {
namespace {

using nlohmann::json;

std::string fixture_path(const std::string& name) { return std::string(DEEPINFER_TEST_DATA_DIR) + "/configs/" + name; }
json fixture(const std::string& name) { return read_json_file(fixture_path(name)); }

TEST(ModelConfig, ParsesV4FlashPublishedConfig) {
  ModelConfig c = load_model_config(fixture_path("v4_flash.json"));
  EXPECT_EQ(c.family, ModelFamily::V4);
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_layers, 43);
  EXPECT_EQ(c.num_mtp_layers, 1);
  EXPECT_EQ(c.total_layers(), 44);
  EXPECT_EQ(c.num_heads, 64);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_head_dim, 64);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_EQ(c.sliding_window, 128);
  ASSERT_EQ(c.compress_ratios.size(), 44u);
  EXPECT_EQ(c.rope_theta, 10000);
  EXPECT_EQ(c.compress_rope_theta, 160000);
  ASSERT_TRUE(c.yarn.has_value());
  EXPECT_EQ(*c.yarn, (YarnScaling{16, 65536, 32, 1}));
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.index_n_heads, 64);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_DOUBLE_EQ(c.hc_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.scoring_func, ScoringFunc::SqrtSoftplus);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_EQ(c.num_hash_layers, 3);
  EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.bos_token_id, std::optional<int64_t>(0));
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.quantization.dense_format, WeightFormat::FP8);
  EXPECT_EQ(c.quantization.expert_format, WeightFormat::FP4);
  EXPECT_EQ(c.quantization.block_rows, 128);
  EXPECT_EQ(c.quantization.block_cols, 128);
  EXPECT_FALSE(c.dspark.has_value());
  EXPECT_TRUE(c.kv_source_layer_ids.empty());

  // Layers 0,1 SWA; even 2..42 CSA; odd 3..41 HCA; MTP layer 43 SWA (v4_arch §1.1).
  EXPECT_EQ(c.attention_kind(0), AttentionKind::SlidingWindow);
  EXPECT_EQ(c.attention_kind(1), AttentionKind::SlidingWindow);
  EXPECT_EQ(c.attention_kind(2), AttentionKind::CompressedSparse);
  EXPECT_EQ(c.attention_kind(3), AttentionKind::HeavilyCompressed);
  EXPECT_EQ(c.attention_kind(42), AttentionKind::CompressedSparse);
  EXPECT_EQ(c.attention_kind(43), AttentionKind::SlidingWindow);
  EXPECT_TRUE(c.is_mtp_layer(43));
  EXPECT_FALSE(c.is_mtp_layer(42));
  EXPECT_TRUE(c.is_hash_moe_layer(2));
  EXPECT_FALSE(c.is_hash_moe_layer(3));
  EXPECT_FALSE(c.is_hash_moe_layer(43));
  EXPECT_EQ(c.kv_source_of(0), -1);
  EXPECT_EQ(c.kv_source_of(3), 3);
  EXPECT_EQ(c.index_source_of(2), 2);
  EXPECT_EQ(c.index_source_of(3), -1);  // HCA attends everything, selects nothing
  EXPECT_TRUE(c.uses_compress_rope(3));
  EXPECT_FALSE(c.uses_compress_rope(1));
  EXPECT_THROW(c.attention_kind(44), Error);
}

TEST(ModelConfig, ParsesV41FlashPublishedConfig) {
  ModelConfig c = load_model_config(fixture_path("v41_flash.json"));
  EXPECT_EQ(c.family, ModelFamily::V41);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.num_layers, 40);
  EXPECT_EQ(c.num_mtp_layers, 3);
  EXPECT_EQ(c.q_lora_rank, 1280);
  EXPECT_EQ(c.index_n_heads, 32);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.moe_intermediate_size, 2304);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-20);
  EXPECT_EQ(c.num_hash_layers, 0);
  EXPECT_EQ(c.quantization.block_rows, 32);
  EXPECT_EQ(c.quantization.block_cols, 32);
  EXPECT_EQ(c.quantization.expert_format, WeightFormat::FP4);
  EXPECT_EQ(c.kv_source_layer_ids, (std::vector<int64_t>{2, 8, 14, 20}));
  EXPECT_EQ(c.index_source_layer_ids, (std::vector<int64_t>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(c.candidate_source_layer_id, 20);
  EXPECT_EQ(c.candidate_topk_blocks, 2048);
  EXPECT_EQ(c.candidate_block_size, 8);
  EXPECT_EQ(c.engram.layer_ids, (std::vector<int64_t>{1, 14}));
  EXPECT_EQ(c.engram.num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(c.engram.max_ngram_size, 4);
  EXPECT_EQ(c.engram.vocab_size, 16000000);
  EXPECT_EQ(c.engram.n_heads, 8);
  EXPECT_EQ(c.engram.head_dim, 256);
  EXPECT_EQ(c.engram.pad_token_id, 2);
  EXPECT_EQ(c.engram.compressed_vocab_size, 99092);
  ASSERT_TRUE(c.dspark.has_value());
  EXPECT_EQ(c.dspark->block_size, 5);
  EXPECT_EQ(c.dspark->noise_token_id, 128799);
  EXPECT_EQ(c.dspark->target_layer_ids, (std::vector<int64_t>{37, 38, 39}));
  EXPECT_EQ(c.dspark->markov_rank, 256);
  EXPECT_EQ(c.dspark->n_routed_experts, 128);
  EXPECT_EQ(c.dspark->num_experts_per_tok, 3);
  EXPECT_EQ(c.dspark->confidence_temperatures, std::vector<double>(5, 1.0));  // absent: uncalibrated
  EXPECT_EQ(c.image_token_id, std::optional<int64_t>(129264));

  // CSA2 roles (v4_arch §2.10c): groups {2..7}, {8..13}, {14..19} at ratio 2, {20..39} at ratio 1.
  EXPECT_EQ(c.attention_kind(1), AttentionKind::SlidingWindow);
  EXPECT_EQ(c.attention_kind(2), AttentionKind::SharedFull);
  EXPECT_EQ(c.attention_kind(7), AttentionKind::SharedReuse);
  EXPECT_EQ(c.attention_kind(20), AttentionKind::SharedFull);
  EXPECT_EQ(c.attention_kind(24), AttentionKind::SharedReindex);
  EXPECT_EQ(c.attention_kind(25), AttentionKind::SharedReuse);
  EXPECT_EQ(c.attention_kind(40), AttentionKind::SlidingWindow);
  EXPECT_EQ(c.kv_source_of(7), 2);
  EXPECT_EQ(c.kv_source_of(8), 8);
  EXPECT_EQ(c.kv_source_of(19), 14);
  EXPECT_EQ(c.kv_source_of(39), 20);
  EXPECT_EQ(c.kv_source_of(1), -1);
  EXPECT_EQ(c.index_source_of(23), 20);
  EXPECT_EQ(c.index_source_of(27), 24);
  EXPECT_EQ(c.index_source_of(39), 36);
  EXPECT_TRUE(c.is_engram_layer(14));
  EXPECT_FALSE(c.is_engram_layer(2));
  EXPECT_EQ(c.routed_experts_of(39), 384);
  EXPECT_EQ(c.routed_experts_of(40), 128);
}

TEST(ModelConfig, TransformersFormEqualsDeepSeekForm) {
  for (const auto& [deepseek, transformers] : {std::pair{"v4_flash.json", "v4_flash_transformers.json"},
                                               std::pair{"tiny_v4.json", "tiny_v4_transformers.json"}}) {
    ModelConfig a = parse_model_config(fixture(deepseek), deepseek);
    ModelConfig b = parse_model_config(fixture(transformers), transformers);
    EXPECT_EQ(a, b) << deepseek << " vs " << transformers;
    EXPECT_EQ(describe(a), describe(b));
  }
}

TEST(ModelConfig, EqualityNoticesDifferences) {
  // Guards the test above: a real difference must make the configs unequal.
  json changed = fixture("tiny_v4_transformers.json");
  changed["layer_types"][1] = "heavily_compressed_attention";
  EXPECT_NE(parse_model_config(fixture("tiny_v4.json"), "a"), parse_model_config(changed, "b"));
}

TEST(ModelConfig, TinyConfigs) {
  ModelConfig v4 = load_model_config(fixture_path("tiny_v4.json"));
  EXPECT_EQ(v4.hidden_size, 64);
  EXPECT_EQ(v4.compress_ratios, (std::vector<int64_t>{0, 4, 128, 4, 0}));
  EXPECT_EQ(v4.quantization, Quantization{});
  EXPECT_EQ(v4.num_hash_layers, 1);

  ModelConfig v41 = load_model_config(fixture_path("tiny_v41.json"));
  EXPECT_EQ(v41.family, ModelFamily::V41);
  EXPECT_EQ(v41.hidden_size, 64);
  EXPECT_EQ(v41.attention_kind(1), AttentionKind::SharedFull);
  EXPECT_EQ(v41.attention_kind(2), AttentionKind::SharedFull);
  EXPECT_EQ(v41.attention_kind(3), AttentionKind::SharedReindex);
  EXPECT_EQ(v41.engram.pad_token_id, 2);  // read from transformers' engram_pad_id
  EXPECT_EQ(v41.engram.max_ngram_size, 3);
  EXPECT_FALSE(v41.bos_token_id.has_value());  // transformers V4.1 default: None
  EXPECT_FALSE(v41.dspark.has_value());
}

TEST(ModelConfig, FlatV41TextConfigEqualsNested) {
  json nested = fixture("tiny_v41.json");
  json flat = nested["text_config"];
  flat["model_type"] = "deepseek_v41_text";
  EXPECT_EQ(parse_model_config(nested, "nested"), parse_model_config(flat, "flat"));
}

TEST(ModelConfig, LoadsFromDirectoryAndNamesMissingFile) {
  auto dir = std::filesystem::temp_directory_path() / "deepinfer_model_config_test";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture_path("tiny_v4.json"), dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(load_model_config(dir.string()), load_model_config(fixture_path("tiny_v4.json")));
  std::filesystem::remove_all(dir);
  try {
    load_model_config("/nonexistent/deepinfer/config.json");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/deepinfer/config.json"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, DescribeGuessesTheRelease) {
  std::string v4 = describe(load_model_config(fixture_path("v4_flash.json")));
  EXPECT_EQ(v4.rfind("DeepSeek-V4-Flash", 0), 0u) << v4;
  EXPECT_NE(v4.find("2 sliding-window, 21 CSA, 20 HCA"), std::string::npos) << v4;
  EXPECT_NE(v4.find("+ 1 MTP"), std::string::npos) << v4;
  EXPECT_NE(v4.find("3 hash-routed"), std::string::npos) << v4;
  EXPECT_NE(v4.find("256 routed (top 6) + 1 shared"), std::string::npos) << v4;
  EXPECT_NE(v4.find("128x128 blocks"), std::string::npos) << v4;
  EXPECT_NE(v4.find("experts FP4"), std::string::npos) << v4;

  std::string v41 = describe(load_model_config(fixture_path("v41_flash.json")));
  EXPECT_EQ(v41.rfind("DeepSeek-V4.1-Flash", 0), 0u) << v41;
  EXPECT_NE(v41.find("4 CSA2 full"), std::string::npos) << v41;
  EXPECT_NE(v41.find("4 CSA2 reindex"), std::string::npos) << v41;
  EXPECT_NE(v41.find("30 CSA2 reuse"), std::string::npos) << v41;
  EXPECT_NE(v41.find("32x32"), std::string::npos) << v41;

  EXPECT_EQ(describe(load_model_config(fixture_path("tiny_v4.json"))).rfind("V4 family, custom size", 0), 0u);
  std::string tiny = describe(load_model_config(fixture_path("tiny_v41.json")));
  EXPECT_EQ(tiny.rfind("V4.1 family, custom size", 0), 0u) << tiny;
  EXPECT_NE(tiny.find("quantization: none"), std::string::npos) << tiny;

  // V4-Pro sizes (third-party model pages; see model_config.cpp).
  json pro = fixture("v4_flash.json");
  pro["hidden_size"] = 7168;
  pro["num_hidden_layers"] = 61;
  pro["num_attention_heads"] = 128;
  pro["q_lora_rank"] = 1536;
  pro["o_groups"] = 16;
  pro["n_routed_experts"] = 384;
  pro["moe_intermediate_size"] = 3072;
  pro["index_topk"] = 1024;
  json ratios = json::array({128, 128});
  for (int i = 2; i < 61; ++i) ratios.push_back(i % 2 == 0 ? 4 : 128);
  ratios.push_back(0);
  pro["compress_ratios"] = ratios;
  EXPECT_EQ(describe(parse_model_config(pro, "pro")).rfind("DeepSeek-V4-Pro", 0), 0u);
}

// --- validation: each case mutates a fixture and names the field the error must mention.

struct BadConfig {
  const char* label;
  const char* fixture;
  std::function<void(json&)> mutate;
  std::vector<std::string> expected;  // substrings of the message
};

void PrintTo(const BadConfig& bad, std::ostream* os) { *os << bad.label; }

class ModelConfigErrors : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ModelConfigErrors, NamesTheField) {
  const BadConfig& bad = GetParam();
  json document = fixture(bad.fixture);
  bad.mutate(document);
  try {
    parse_model_config(document, "some/config.json");
    FAIL() << "expected an Error for " << bad.label;
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("some/config.json"), std::string::npos) << message;
    for (const std::string& part : bad.expected) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

json& text(json& d) { return d["text_config"]; }

const BadConfig kBadConfigs[] = {
    {"not_an_object", "v4_flash.json", [](json& d) { d = json::array(); }, {"must be a JSON object"}},
    {"missing_model_type", "v4_flash.json", [](json& d) { d.erase("model_type"); }, {"`model_type`", "missing"}},
    {"unknown_model_type", "v4_flash.json", [](json& d) { d["model_type"] = "deepseek_v3"; },
     {"`model_type`", "deepseek_v3"}},
    {"architectures_contradict", "v4_flash.json", [](json& d) { d["architectures"] = {"DeepseekV41ForCausalLM"}; },
     {"`architectures`", "DeepseekV41ForCausalLM"}},
    {"missing_vocab", "v4_flash.json", [](json& d) { d.erase("vocab_size"); }, {"`vocab_size`", "missing"}},
    {"missing_nested_hidden", "v41_flash.json", [](json& d) { text(d).erase("hidden_size"); },
     {"`text_config.hidden_size`", "missing"}},
    {"null_is_missing", "v41_flash.json", [](json& d) { text(d)["head_dim"] = nullptr; },
     {"`text_config.head_dim`", "missing"}},
    {"string_for_integer", "v4_flash.json", [](json& d) { d["hidden_size"] = "4096"; },
     {"`hidden_size`", "must be an integer", "got a JSON string"}},
    {"fraction_for_integer", "v4_flash.json", [](json& d) { d["num_attention_heads"] = 64.5; },
     {"`num_attention_heads`", "must be an integer", "non-integral"}},
    {"text_config_not_object", "v41_flash.json", [](json& d) { d["text_config"] = json::array(); },
     {"`text_config`", "must be an object", "got a JSON array"}},
    {"bool_wrong_type", "v4_flash.json", [](json& d) { d["norm_topk_prob"] = 1; },
     {"`norm_topk_prob`", "must be a boolean", "number"}},
    {"ratio_element_wrong_type", "v4_flash.json", [](json& d) { d["compress_ratios"][5] = "4"; },
     {"`compress_ratios[5]`", "must be an integer"}},
    {"eos_wrong_type", "v4_flash.json", [](json& d) { d["eos_token_id"] = "1"; }, {"`eos_token_id`", "integer"}},
    {"too_many_layers", "v4_flash.json", [](json& d) { d["num_hidden_layers"] = 2000; },
     {"`num_hidden_layers`", "2000", "[1, 1024]"}},
    {"too_many_experts", "v4_flash.json", [](json& d) { d["n_routed_experts"] = 5000; },
     {"`n_routed_experts`", "5000", "4096"}},
    {"too_many_expert_instances", "v4_flash.json", [](json& d) { d["n_routed_experts"] = 4096; },
     {"`n_routed_experts`", "expert instances"}},
    {"negative_width", "v4_flash.json", [](json& d) { d["q_lora_rank"] = -1; }, {"`q_lora_rank`", "-1"}},
    {"huge_unsigned", "v4_flash.json", [](json& d) { d["vocab_size"] = 18446744073709551615ull; },
     {"`vocab_size`", "above the maximum"}},
    {"huge_float_layer_id", "v41_flash.json", [](json& d) { text(d)["kv_source_layer_ids"][0] = 9.3e18; },
     {"`text_config.kv_source_layer_ids[0]`", "outside"}},
    {"v4_ratios_length", "v4_flash.json", [](json& d) { d["compress_ratios"].erase(43); },
     {"`compress_ratios`", "43 entries", "43 + 1"}},
    {"v41_ratios_length", "v41_flash.json", [](json& d) { text(d)["compress_ratios"].erase(40); },
     {"`text_config.compress_ratios`", "42 entries", "40 + 3"}},
    {"v4_ratio_value", "v4_flash.json", [](json& d) { d["compress_ratios"][5] = 1; },
     {"`compress_ratios[5]`", "not a V4 compress ratio"}},
    {"v41_ratio_value", "v41_flash.json", [](json& d) { text(d)["compress_ratios"][5] = 4; },
     {"`text_config.compress_ratios[5]`", "not a V4.1 compress ratio"}},
    {"mtp_ratio_nonzero", "v4_flash.json", [](json& d) { d["compress_ratios"][43] = 4; },
     {"`compress_ratios[43]`", "MTP"}},
    {"rope_exceeds_head_dim", "v4_flash.json", [](json& d) { d["qk_rope_head_dim"] = 1024; },
     {"`qk_rope_head_dim`", "exceeds", "`head_dim`"}},
    {"head_dim_below_rope", "v4_flash.json", [](json& d) { d["head_dim"] = 32; },
     {"`qk_rope_head_dim`", "exceeds", "`head_dim` = 32"}},
    {"odd_rope", "v4_flash.json", [](json& d) { d["qk_rope_head_dim"] = 63; }, {"`qk_rope_head_dim`", "even"}},
    {"missing_rope_dims", "v4_flash.json", [](json& d) { d.erase("qk_rope_head_dim"); },
     {"`qk_rope_head_dim`", "missing"}},
    {"missing_rope_theta", "v4_flash.json", [](json& d) { d.erase("rope_theta"); }, {"`rope_theta`", "missing"}},
    {"unsupported_rope_type", "v4_flash.json", [](json& d) { d["rope_scaling"]["type"] = "linear"; },
     {"`rope_scaling.type`", "linear"}},
    {"yarn_missing_factor", "v4_flash.json", [](json& d) { d["rope_scaling"].erase("factor"); },
     {"`rope_scaling.factor`", "missing"}},
    {"experts_per_token_above_experts", "v4_flash.json", [](json& d) { d["num_experts_per_tok"] = 300; },
     {"`num_experts_per_tok`", "300", "`n_routed_experts` = 256"}},
    {"o_groups_not_dividing_heads", "v4_flash.json", [](json& d) { d["o_groups"] = 7; },
     {"`o_groups`", "does not divide", "`num_attention_heads`"}},
    {"hidden_not_divisible_for_fp4", "v4_flash.json", [](json& d) { d["hidden_size"] = 4100; },
     {"`hidden_size`", "divisible by 32"}},
    {"index_head_dim_below_rope", "v4_flash.json", [](json& d) { d["index_head_dim"] = 32; },
     {"`index_head_dim`", "`qk_rope_head_dim`"}},
    {"kv_heads_not_one", "v4_flash.json", [](json& d) { d["num_key_value_heads"] = 8; },
     {"`num_key_value_heads`", "one shared KV head"}},
    {"unsupported_topk_method", "v4_flash.json", [](json& d) { d["topk_method"] = "greedy"; },
     {"`topk_method`", "greedy"}},
    {"unsupported_scoring", "v4_flash.json", [](json& d) { d["scoring_func"] = "relu"; }, {"`scoring_func`", "relu"}},
    {"missing_hash_layers", "v4_flash.json", [](json& d) { d.erase("num_hash_layers"); },
     {"`num_hash_layers`", "missing"}},
    {"v41_with_hash_layers", "v41_flash.json", [](json& d) { text(d)["num_hash_layers"] = 3; },
     {"`text_config.num_hash_layers`", "V4.1"}},
    {"v41_with_hash_moe_types", "v41_flash.json",
     [](json& d) {
       json types = json::array();
       for (int i = 0; i < 40; ++i) types.push_back(i < 2 ? "hash_moe" : "moe");
       text(d)["mlp_layer_types"] = types;
     },
     {"`text_config.mlp_layer_types`", "V4.1"}},
    {"hash_after_moe", "v4_flash_transformers.json", [](json& d) { d["mlp_layer_types"][10] = "hash_moe"; },
     {"`mlp_layer_types[10]`", "hash layers must come first"}},
    {"hash_count_contradiction", "v4_flash_transformers.json", [](json& d) { d["num_hash_layers"] = 2; },
     {"`num_hash_layers`", "contradicts", "mlp_layer_types"}},
    {"layer_types_contradict_ratios", "v4_flash_transformers.json",
     [](json& d) {
       json ratios = fixture("v4_flash.json")["compress_ratios"];
       ratios[2] = 128;
       d["compress_ratios"] = ratios;
     },
     {"`layer_types[2]`", "compressed_sparse_attention", "`compress_ratios[2]` = 128"}},
    {"csa_rate_not_4", "v4_flash_transformers.json",
     [](json& d) { d["compress_rates"] = {{"compressed_sparse_attention", 8}, {"heavily_compressed_attention", 128}}; },
     {"`compress_rates.compressed_sparse_attention`", "must be 4"}},
    {"hca_rate_4", "v4_flash_transformers.json",
     [](json& d) { d["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 4}}; },
     {"`compress_rates.heavily_compressed_attention`", "CSA"}},
    {"layer_types_length", "v4_flash_transformers.json", [](json& d) { d["layer_types"].erase(0); },
     {"`layer_types`", "42 entries"}},
    {"unknown_layer_type", "v4_flash_transformers.json", [](json& d) { d["layer_types"][4] = "full_attention"; },
     {"`layer_types[4]`", "full_attention"}},
    {"missing_schedule", "v4_flash_transformers.json", [](json& d) { d.erase("layer_types"); },
     {"`compress_ratios`", "missing"}},
    {"rope_theta_contradiction", "v4_flash_transformers.json",
     [](json& d) { d["rope_parameters"]["main"]["rope_theta"] = 5000.0; },
     {"`rope_theta`", "contradicts", "`rope_parameters.main.rope_theta`"}},
    {"rope_factor_contradiction", "v4_flash_transformers.json",
     [](json& d) { d["partial_rotary_factor"] = 0.25; },
     {"`rope_parameters.main.partial_rotary_factor`", "gives 64 rope dims", "`partial_rotary_factor` (128"}},
    {"yarn_contradiction", "v4_flash_transformers.json",
     [](json& d) {
       d["rope_scaling"] = {{"type", "yarn"}, {"factor", 8}, {"original_max_position_embeddings", 65536}};
     },
     {"`rope_parameters.compress.factor`", "`rope_scaling.factor`"}},
    {"kv_source_out_of_range", "v41_flash.json", [](json& d) { text(d)["kv_source_layer_ids"][3] = 40; },
     {"`text_config.kv_source_layer_ids[3]`", "out of range"}},
    {"kv_source_unsorted", "v41_flash.json", [](json& d) { text(d)["kv_source_layer_ids"] = {8, 2, 14, 20}; },
     {"`text_config.kv_source_layer_ids`", "sorted"}},
    {"index_source_repeated", "v41_flash.json",
     [](json& d) { text(d)["index_source_layer_ids"] = {2, 8, 8, 14, 20}; },
     {"`text_config.index_source_layer_ids`", "sorted"}},
    {"kv_source_window_layer", "v41_flash.json", [](json& d) { text(d)["kv_source_layer_ids"] = {1, 2, 8, 14, 20}; },
     {"`text_config.kv_source_layer_ids`", "layer 1", "ratio is 0"}},
    {"kv_source_gap", "v41_flash.json", [](json& d) { text(d)["kv_source_layer_ids"] = {8, 14, 20}; },
     {"`text_config.kv_source_layer_ids`", "before layer 2"}},
    {"kv_source_not_index_source", "v41_flash.json",
     [](json& d) { text(d)["index_source_layer_ids"] = {2, 14, 20, 24}; },
     {"`text_config.index_source_layer_ids`", "layer 8"}},
    {"ratio_differs_from_source", "v41_flash.json", [](json& d) { text(d)["compress_ratios"][9] = 1; },
     {"`text_config.compress_ratios[9]`", "kv source layer 8"}},
    {"missing_kv_sources", "v41_flash.json", [](json& d) { text(d).erase("kv_source_layer_ids"); },
     {"`text_config.kv_source_layer_ids`", "missing"}},
    {"candidate_not_index_source", "v41_flash.json", [](json& d) { text(d)["candidate_source_layer_id"] = 21; },
     {"`text_config.candidate_source_layer_id`", "21"}},
    {"v41_layer_types_contradict_sources", "v41_flash.json",
     [](json& d) {
       json types = json::array();
       for (int i = 0; i < 40; ++i) types.push_back(i == 3 ? "shared_compressed_attention" : "sliding_attention");
       text(d)["layer_types"] = types;
     },
     {"`text_config.layer_types[2]`", "kv_source_layer_ids"}},
    {"engram_rows_length", "v41_flash.json", [](json& d) { text(d)["engram_num_embeddings"] = {1000}; },
     {"`text_config.engram_num_embeddings`", "1 entries"}},
    {"engram_rows_missing", "v41_flash.json", [](json& d) { text(d).erase("engram_num_embeddings"); },
     {"`text_config.engram_num_embeddings`", "missing"}},
    {"engram_pad_contradiction", "v41_flash.json", [](json& d) { text(d)["engram_pad_id"] = 3; },
     {"`text_config.engram_pad_token_id`", "contradicts", "engram_pad_id"}},
    {"v4_with_kv_sources", "v4_flash.json", [](json& d) { d["kv_source_layer_ids"] = {2}; },
     {"`kv_source_layer_ids`", "V4.1 field"}},
    {"block_size_zero", "v4_flash.json", [](json& d) { d["quantization_config"]["weight_block_size"] = {0, 128}; },
     {"`quantization_config.weight_block_size[0]`", "positive"}},
    {"block_size_negative", "v41_flash.json",
     [](json& d) { d["quantization_config"]["weight_block_size"] = {32, -32}; },
     {"`quantization_config.weight_block_size[1]`", "positive"}},
    {"block_size_arity", "v4_flash.json", [](json& d) { d["quantization_config"]["weight_block_size"] = {128}; },
     {"`quantization_config.weight_block_size`", "expected 2"}},
    {"block_size_missing", "v41_flash.json", [](json& d) { d["quantization_config"].erase("weight_block_size"); },
     {"`quantization_config.weight_block_size`", "missing"}},
    {"unsupported_quant_method", "v4_flash.json", [](json& d) { d["quantization_config"]["quant_method"] = "awq"; },
     {"`quantization_config.quant_method`", "awq"}},
    {"unsupported_scale_fmt", "v4_flash.json", [](json& d) { d["quantization_config"]["scale_fmt"] = "fp32"; },
     {"`quantization_config.scale_fmt`", "fp32"}},
    {"expert_dtype_contradiction", "v4_flash.json", [](json& d) { d["quantization_config"]["expert_dtype"] = "fp8"; },
     {"`expert_dtype`", "contradicts", "`quantization_config.expert_dtype`"}},
    {"expert_dtype_unknown", "v41_flash.json", [](json& d) { d["quantization_config"]["expert_dtype"] = "int4"; },
     {"`quantization_config.expert_dtype`", "int4"}},
    {"expert_dtype_without_quantization", "v4_flash.json", [](json& d) { d.erase("quantization_config"); },
     {"`expert_dtype`", "quantization_config"}},
    {"dspark_target_out_of_range", "v41_flash.json", [](json& d) { text(d)["dspark_target_layer_ids"] = {37, 38, 40}; },
     {"`text_config.dspark_target_layer_ids[2]`", "out of range"}},
    {"dspark_temperatures_length", "v41_flash.json",
     [](json& d) { text(d)["dspark_confidence_temperatures"] = {1.0, 0.9}; },
     {"`text_config.dspark_confidence_temperatures`", "2 entries", "dspark_block_size is 5"}},
    {"dspark_temperature_zero", "v41_flash.json",
     [](json& d) { text(d)["dspark_confidence_temperatures"] = {1.0, 0.0, 1.0, 1.0, 1.0}; },
     {"`text_config.dspark_confidence_temperatures[1]`", "outside"}},
    {"dspark_temperature_not_a_number", "v41_flash.json",
     [](json& d) { text(d)["dspark_confidence_temperatures"] = {1.0, "hot", 1.0, 1.0, 1.0}; },
     {"`text_config.dspark_confidence_temperatures[1]`", "number"}},
    {"token_out_of_vocab", "v4_flash.json", [](json& d) { d["bos_token_id"] = 129280; }, {"`bos_token_id`", "129280"}},
};

INSTANTIATE_TEST_SUITE_P(Mutations, ModelConfigErrors, ::testing::ValuesIn(kBadConfigs),
                         [](const auto& param_info) { return std::string(param_info.param.label); });

TEST(ModelConfig, UnknownExtraKeysAreFine) {
  json document = fixture("v4_flash.json");
  document["some_future_key"] = {{"nested", true}};
  document["n_routed_experts_score"] = 128;
  EXPECT_EQ(parse_model_config(document, "x"), parse_model_config(fixture("v4_flash.json"), "y"));
}

TEST(ModelConfig, OptionalFieldsTakeFamilyDefaults) {
  json document = fixture("v41_flash.json");
  for (const char* key : {"rms_norm_eps", "hc_eps", "hc_sinkhorn_iters", "scoring_func", "topk_method",
                          "norm_topk_prob", "routed_scaling_factor", "swiglu_limit", "sliding_window",
                          "max_position_embeddings", "candidate_source_layer_id", "candidate_topk_blocks",
                          "candidate_block_size", "engram_pad_token_id", "num_key_value_heads"})
    text(document).erase(key);
  EXPECT_EQ(parse_model_config(document, "x"), load_model_config(fixture_path("v41_flash.json")));
}

}  // namespace
}  // namespace deepinfer

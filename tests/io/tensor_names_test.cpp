#include "io/tensor_names.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace deepinfer {
namespace {

std::string canonical_of(std::string_view stored) {
  const auto name = canonical_tensor_name(stored);
  if (!name) return "<unknown>";
  if (name->is_fused()) return "<fused>";
  return name->name;
}

// One representative per tensor family: {transformers spelling, canonical spelling}. Written out
// from the transformers DeepseekV4ForCausalLM module tree (see tensor_names.h for the commit).
const std::vector<std::pair<std::string, std::string>> kV4Families = {
    {"model.embed_tokens.weight", "embed.weight"},
    {"lm_head.weight", "head.weight"},
    {"model.norm.weight", "norm.weight"},
    {"model.hc_head.hc_fn", "hc_head_fn"},
    {"model.hc_head.hc_base", "hc_head_base"},
    {"model.hc_head.hc_scale", "hc_head_scale"},
    {"model.layers.7.input_layernorm.weight", "layers.7.attn_norm.weight"},
    {"model.layers.7.post_attention_layernorm.weight", "layers.7.ffn_norm.weight"},
    {"model.layers.7.attn_hc.fn", "layers.7.hc_attn_fn"},
    {"model.layers.7.attn_hc.base", "layers.7.hc_attn_base"},
    {"model.layers.7.attn_hc.scale", "layers.7.hc_attn_scale"},
    {"model.layers.7.ffn_hc.fn", "layers.7.hc_ffn_fn"},
    {"model.layers.7.ffn_hc.base", "layers.7.hc_ffn_base"},
    {"model.layers.7.ffn_hc.scale", "layers.7.hc_ffn_scale"},
    {"model.layers.7.self_attn.q_a_proj.weight", "layers.7.attn.wq_a.weight"},
    {"model.layers.7.self_attn.q_a_norm.weight", "layers.7.attn.q_norm.weight"},
    {"model.layers.7.self_attn.q_b_proj.weight", "layers.7.attn.wq_b.weight"},
    {"model.layers.7.self_attn.kv_proj.weight", "layers.7.attn.wkv.weight"},
    {"model.layers.7.self_attn.kv_norm.weight", "layers.7.attn.kv_norm.weight"},
    {"model.layers.7.self_attn.o_a_proj.weight", "layers.7.attn.wo_a.weight"},
    {"model.layers.7.self_attn.o_b_proj.weight", "layers.7.attn.wo_b.weight"},
    {"model.layers.7.self_attn.sinks", "layers.7.attn.attn_sink"},
    {"model.layers.2.self_attn.compressor.kv_proj.weight", "layers.2.attn.compressor.wkv.weight"},
    {"model.layers.2.self_attn.compressor.gate_proj.weight", "layers.2.attn.compressor.wgate.weight"},
    {"model.layers.2.self_attn.compressor.position_bias", "layers.2.attn.compressor.ape"},
    {"model.layers.2.self_attn.compressor.kv_norm.weight", "layers.2.attn.compressor.norm.weight"},
    {"model.layers.2.self_attn.compressor.indexer.q_b_proj.weight", "layers.2.attn.indexer.wq_b.weight"},
    {"model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight",
     "layers.2.attn.indexer.weights_proj.weight"},
    {"model.layers.2.self_attn.compressor.indexer.weights_proj.weight", "layers.2.attn.indexer.weights_proj.weight"},
    {"model.layers.2.self_attn.compressor.indexer.kv_proj.weight", "layers.2.attn.indexer.compressor.wkv.weight"},
    {"model.layers.2.self_attn.compressor.indexer.gate_proj.weight", "layers.2.attn.indexer.compressor.wgate.weight"},
    {"model.layers.2.self_attn.compressor.indexer.position_bias", "layers.2.attn.indexer.compressor.ape"},
    {"model.layers.2.self_attn.compressor.indexer.kv_norm.weight", "layers.2.attn.indexer.compressor.norm.weight"},
    {"model.layers.42.mlp.gate.weight", "layers.42.ffn.gate.weight"},
    {"model.layers.42.mlp.gate.e_score_correction_bias", "layers.42.ffn.gate.bias"},
    {"model.layers.0.mlp.gate.tid2eid", "layers.0.ffn.gate.tid2eid"},
    {"model.layers.7.mlp.shared_experts.gate_proj.weight", "layers.7.ffn.shared_experts.w1.weight"},
    {"model.layers.7.mlp.shared_experts.up_proj.weight", "layers.7.ffn.shared_experts.w3.weight"},
    {"model.layers.7.mlp.shared_experts.down_proj.weight", "layers.7.ffn.shared_experts.w2.weight"},
    // FP8 scales: DeepSeek's `.scale` sibling is `.weight_scale_inv` under transformers' FP8 quantizer.
    {"model.layers.7.self_attn.q_a_proj.weight_scale_inv", "layers.7.attn.wq_a.scale"},
    {"model.layers.7.mlp.shared_experts.down_proj.weight_scale_inv", "layers.7.ffn.shared_experts.w2.scale"},
    {"model.layers.2.self_attn.compressor.indexer.q_b_proj.weight_scale_inv", "layers.2.attn.indexer.wq_b.scale"},
};

TEST(TensorNames, BothSpellingsOfEveryV4FamilyMapToTheCanonicalName) {
  for (const auto& [transformers, canonical] : kV4Families) {
    EXPECT_EQ(canonical_of(transformers), canonical) << transformers;
    EXPECT_EQ(canonical_of(canonical), canonical) << canonical;
    EXPECT_EQ(canonical_tensor_name(transformers)->convention, NamingConvention::Transformers) << transformers;
    EXPECT_EQ(canonical_tensor_name(canonical)->convention, NamingConvention::DeepSeek) << canonical;
  }
}

TEST(TensorNames, DeepSeekExpertsScalesAndMtp) {
  EXPECT_EQ(canonical_of("layers.3.ffn.experts.255.w1.weight"), "layers.3.ffn.experts.255.w1.weight");
  EXPECT_EQ(canonical_of("layers.3.ffn.experts.0.w2.scale"), "layers.3.ffn.experts.0.w2.scale");
  EXPECT_EQ(canonical_of("layers.3.attn.wo_b.scale"), "layers.3.attn.wo_b.scale");
  // Converted dumps that keep DeepSeek's names but spell the scale `weight_scale_inv`.
  EXPECT_EQ(canonical_of("layers.3.attn.wo_b.weight_scale_inv"), "layers.3.attn.wo_b.scale");
  EXPECT_EQ(canonical_tensor_name("layers.3.attn.wo_b.weight_scale_inv")->convention, NamingConvention::DeepSeek);
  // The MTP block is a full layer plus its own projections and head.
  EXPECT_EQ(canonical_of("mtp.0.attn.wq_a.weight"), "mtp.0.attn.wq_a.weight");
  EXPECT_EQ(canonical_of("mtp.0.ffn.experts.12.w3.scale"), "mtp.0.ffn.experts.12.w3.scale");
  EXPECT_EQ(canonical_of("mtp.0.e_proj.weight"), "mtp.0.e_proj.weight");
  EXPECT_EQ(canonical_of("mtp.0.h_proj.scale"), "mtp.0.h_proj.scale");
  EXPECT_EQ(canonical_of("mtp.2.hc_head_fn"), "mtp.2.hc_head_fn");
  EXPECT_EQ(canonical_of("mtp.0.norm.weight"), "mtp.0.norm.weight");
}

TEST(TensorNames, V41TransformersNamesAreModelPrefixedCanonicalNames) {
  const std::vector<std::pair<std::string, std::string>> families = {
      {"model.embed.weight", "embed.weight"},
      {"lm_head.weight", "head.weight"},
      {"model.layers.1.engram.embed.weight", "layers.1.engram.embed.weight"},
      {"model.layers.1.engram.embed.scale", "layers.1.engram.embed.scale"},
      {"model.layers.14.engram.wkv.weight", "layers.14.engram.wkv.weight"},
      {"model.layers.14.engram.q_weight", "layers.14.engram.q_weight"},
      {"model.layers.14.engram.k_weight", "layers.14.engram.k_weight"},
      {"model.layers.20.attn.indexer.wk.weight", "layers.20.attn.indexer.wk.weight"},
      {"model.layers.20.attn.indexer.k_norm.weight", "layers.20.attn.indexer.k_norm.weight"},
      {"model.layers.20.attn.compressor.wkv.weight", "layers.20.attn.compressor.wkv.weight"},
      {"model.layers.9.ffn.gate.bias_vl", "layers.9.ffn.gate.bias_vl"},
      {"model.layers.9.hc_attn_fn", "layers.9.hc_attn_fn"},
      {"model.layers.9.attn.attn_sink", "layers.9.attn.attn_sink"},
      {"model.layers.9.ffn.experts.383.w2.weight", "layers.9.ffn.experts.383.w2.weight"},
  };
  for (const auto& [transformers, canonical] : families) {
    EXPECT_EQ(canonical_of(transformers), canonical) << transformers;
    EXPECT_EQ(canonical_of(canonical), canonical) << canonical;
  }
}

// transformers 5.17's save_pretrained output (tests/data/golden/v4/tiny_bf16): "model." + DeepSeek
// names, except the attention's kv_norm, which its reversed rename rules spell `attn.norm`.
TEST(TensorNames, SavePretrainedSpellingOfKvNorm) {
  EXPECT_EQ(canonical_of("model.layers.3.attn.norm.weight"), "layers.3.attn.kv_norm.weight");
  EXPECT_EQ(canonical_of("model.layers.3.attn.compressor.norm.weight"), "layers.3.attn.compressor.norm.weight");
  EXPECT_EQ(canonical_of("model.hc_head.hc_fn"), "hc_head_fn");
  // The alias is accepted but never produced.
  auto location = transformers_tensor_location("layers.3.attn.kv_norm.weight");
  ASSERT_TRUE(location.has_value());
  EXPECT_EQ(location->name, "model.layers.3.self_attn.kv_norm.weight");
}

TEST(TensorNames, UnknownNamesAreRejected) {
  for (std::string_view name : {
           "", "layers", "layers.3", "layers.3.", "layers.x.attn.wq_a.weight", "layers.01.attn.wq_a.weight",
           "layers.-1.attn.wq_a.weight", "layers.3.attn.wq_c.weight", "layers.3.attn.wq_a.weight.extra",
           "layers.3.attn_norm.scale",              // norms carry no scale
           "layers.3.attn.attn_sink.scale",         // neither do sinks
           "model.layers.3.self_attn.q_a_proj.scale",  // transformers spells scales weight_scale_inv
           "layers.3.ffn.experts.E.w1.weight", "layers.3.ffn.experts.01.w1.weight",
           "layers.3.ffn.experts..w1.weight", "layers.0.e_proj.weight",  // MTP-only tensor outside mtp
           "model.mtp.0.e_proj.weight",             // transformers drops MTP
           "model.layers.3.mlp.experts.gate_up_proj_scale_inv", "model.layers.3.mlp.experts.gate_up_proj.weight",
           "model.model.norm.weight", "embed_tokens.weight", "vision.blocks.0.attn.qkv.weight",
           "aligner.layers.0.weight", "hc_head_fn.weight", "MODEL.norm.weight"}) {
    EXPECT_FALSE(canonical_tensor_name(name).has_value()) << "'" << name << "'";
  }
}

TEST(TensorNames, FusedExpertStacksListTheirParts) {
  const auto gate_up = canonical_tensor_name("model.layers.5.mlp.experts.gate_up_proj");
  ASSERT_TRUE(gate_up.has_value());
  ASSERT_TRUE(gate_up->is_fused());
  EXPECT_TRUE(gate_up->name.empty());
  ASSERT_EQ(gate_up->fused_parts.size(), 2u);
  // gate_up_proj[E] = [w1 rows; w3 rows]: w1 is row block 0 of 2, w3 row block 1 of 2.
  EXPECT_EQ(gate_up->fused_parts[0].canonical_pattern, "layers.5.ffn.experts.{E}.w1.weight");
  EXPECT_EQ(gate_up->fused_parts[0].part, 0);
  EXPECT_EQ(gate_up->fused_parts[0].parts, 2);
  EXPECT_EQ(gate_up->fused_parts[1].canonical_pattern, "layers.5.ffn.experts.{E}.w3.weight");
  EXPECT_EQ(gate_up->fused_parts[1].part, 1);
  EXPECT_EQ(gate_up->fused_parts[1].parts, 2);
  EXPECT_EQ(expert_part_name(gate_up->fused_parts[1], 17), "layers.5.ffn.experts.17.w3.weight");

  const auto down = canonical_tensor_name("model.layers.5.mlp.experts.down_proj");
  ASSERT_TRUE(down.has_value());
  ASSERT_EQ(down->fused_parts.size(), 1u);
  EXPECT_EQ(down->fused_parts[0].canonical_pattern, "layers.5.ffn.experts.{E}.w2.weight");
  EXPECT_EQ(down->fused_parts[0].parts, 1);
  EXPECT_EQ(expert_part_name(down->fused_parts[0], 0), "layers.5.ffn.experts.0.w2.weight");
}

TEST(TensorNames, TransformersLocationOfCanonicalNames) {
  const auto w3 = transformers_tensor_location("layers.5.ffn.experts.17.w3.weight");
  ASSERT_TRUE(w3.has_value());
  EXPECT_EQ(w3->name, "model.layers.5.mlp.experts.gate_up_proj");
  ASSERT_TRUE(w3->slice.has_value());
  EXPECT_EQ(w3->slice->expert, 17);
  EXPECT_EQ(w3->slice->part, 1);
  EXPECT_EQ(w3->slice->parts, 2);

  const auto w2 = transformers_tensor_location("layers.5.ffn.experts.3.w2.weight");
  ASSERT_TRUE(w2.has_value());
  EXPECT_EQ(w2->name, "model.layers.5.mlp.experts.down_proj");
  EXPECT_EQ(w2->slice->expert, 3);
  EXPECT_EQ(w2->slice->parts, 1);

  const auto scale = transformers_tensor_location("layers.5.attn.wq_a.scale");
  ASSERT_TRUE(scale.has_value());
  EXPECT_EQ(scale->name, "model.layers.5.self_attn.q_a_proj.weight_scale_inv");
  EXPECT_FALSE(scale->slice.has_value());

  // The current spelling is produced, not the legacy one.
  EXPECT_EQ(transformers_tensor_location("layers.2.attn.indexer.weights_proj.weight")->name,
            "model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight");
  EXPECT_EQ(transformers_tensor_location("head.weight")->name, "lm_head.weight");
  EXPECT_EQ(transformers_tensor_location("hc_head_scale")->name, "model.hc_head.hc_scale");

  for (std::string_view absent : {"mtp.0.attn.wq_a.weight", "mtp.0.e_proj.weight", "layers.1.engram.embed.weight",
                                  "layers.3.ffn.experts.1.w1.scale", "layers.3.attn_norm.scale", "bogus",
                                  "model.layers.5.self_attn.q_a_proj.weight"})
    EXPECT_FALSE(transformers_tensor_location(absent).has_value()) << absent;
}

TEST(TensorNames, TableRoundTripsWithoutAmbiguity) {
  // Every current row with a transformers spelling: the canonical name maps to the transformers
  // name and back. Catches two rows sharing a spelling, or a pattern another pattern shadows.
  int checked = 0;
  for (const auto& row : tensor_name_patterns()) {
    if (!row.current || row.transformers.empty()) continue;
    std::string canonical(row.canonical);
    if (row.scope == TensorScope::Layer) canonical = "layers.11." + canonical;
    if (const auto placeholder = canonical.find("{E}"); placeholder != std::string::npos)
      canonical = canonical.substr(0, placeholder) + "9" + canonical.substr(placeholder + 3);
    const auto location = transformers_tensor_location(canonical);
    ASSERT_TRUE(location.has_value()) << canonical;
    const auto back = canonical_tensor_name(location->name);
    ASSERT_TRUE(back.has_value()) << location->name;
    if (location->slice) {
      ASSERT_LT(static_cast<std::size_t>(location->slice->part), back->fused_parts.size());
      EXPECT_EQ(expert_part_name(back->fused_parts[location->slice->part], location->slice->expert), canonical);
    } else {
      EXPECT_EQ(back->name, canonical);
    }
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

}  // namespace
}  // namespace deepinfer

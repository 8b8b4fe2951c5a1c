#include "io/tensor_names.h"

#include <array>

namespace deepinfer {
namespace {

using enum TensorScope;

// Canonical (DeepSeek) pattern -> transformers V4 module name. Layer rows are relative to
// "layers.L." / "model.layers.L.". Sources: see tensor_names.h.
constexpr std::array kPatterns = {
    // Model-level tensors.
    TensorNamePattern{Model, "embed.weight", "model.embed_tokens.weight"},
    TensorNamePattern{Model, "head.weight", "lm_head.weight", true},
    TensorNamePattern{Model, "norm.weight", "model.norm.weight"},
    TensorNamePattern{Model, "hc_head_fn", "model.hc_head.hc_fn"},
    TensorNamePattern{Model, "hc_head_base", "model.hc_head.hc_base"},
    TensorNamePattern{Model, "hc_head_scale", "model.hc_head.hc_scale"},

    // Norms and manifold-constrained hyper-connections of a block.
    TensorNamePattern{Layer, "attn_norm.weight", "input_layernorm.weight"},
    TensorNamePattern{Layer, "ffn_norm.weight", "post_attention_layernorm.weight"},
    TensorNamePattern{Layer, "hc_attn_fn", "attn_hc.fn"},
    TensorNamePattern{Layer, "hc_attn_base", "attn_hc.base"},
    TensorNamePattern{Layer, "hc_attn_scale", "attn_hc.scale"},
    TensorNamePattern{Layer, "hc_ffn_fn", "ffn_hc.fn"},
    TensorNamePattern{Layer, "hc_ffn_base", "ffn_hc.base"},
    TensorNamePattern{Layer, "hc_ffn_scale", "ffn_hc.scale"},

    // Attention.
    TensorNamePattern{Layer, "attn.wq_a.weight", "self_attn.q_a_proj.weight", true},
    TensorNamePattern{Layer, "attn.q_norm.weight", "self_attn.q_a_norm.weight"},
    TensorNamePattern{Layer, "attn.wq_b.weight", "self_attn.q_b_proj.weight", true},
    TensorNamePattern{Layer, "attn.wkv.weight", "self_attn.kv_proj.weight", true},
    TensorNamePattern{Layer, "attn.kv_norm.weight", "self_attn.kv_norm.weight"},
    // transformers 5.17's save_pretrained reverses its rename rules in order, and the rule for the
    // compressor's `norm` also rewrites the attention's `kv_norm`: files it writes hold
    // `model.layers.L.attn.norm.weight` (seen in tests/data/golden/v4/tiny_bf16).
    TensorNamePattern{Layer, "attn.kv_norm.weight", "attn.norm.weight", false, 0, 1, false},
    TensorNamePattern{Layer, "attn.wo_a.weight", "self_attn.o_a_proj.weight", true},
    TensorNamePattern{Layer, "attn.wo_b.weight", "self_attn.o_b_proj.weight", true},
    TensorNamePattern{Layer, "attn.attn_sink", "self_attn.sinks"},

    // KV compressor (V4 ratio 4 and 128 layers; V4.1 kv-source layers, no `ape` there).
    TensorNamePattern{Layer, "attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight", true},
    TensorNamePattern{Layer, "attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight", true},
    TensorNamePattern{Layer, "attn.compressor.ape", "self_attn.compressor.position_bias"},
    TensorNamePattern{Layer, "attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"},

    // Lightning indexer. transformers nests it inside the CSA compressor.
    TensorNamePattern{Layer, "attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight", true},
    TensorNamePattern{Layer, "attn.indexer.weights_proj.weight",
                      "self_attn.compressor.indexer.scorer.weights_proj.weight", true},
    TensorNamePattern{Layer, "attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.weights_proj.weight",
                      true, 0, 1, false},
    TensorNamePattern{Layer, "attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight",
                      true},
    TensorNamePattern{Layer, "attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight",
                      true},
    TensorNamePattern{Layer, "attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
    TensorNamePattern{Layer, "attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"},
    // V4.1: index keys projected from the kv-source latent.
    TensorNamePattern{Layer, "attn.indexer.wk.weight", "", true},
    TensorNamePattern{Layer, "attn.indexer.k_norm.weight", ""},

    // MoE router.
    TensorNamePattern{Layer, "ffn.gate.weight", "mlp.gate.weight"},
    TensorNamePattern{Layer, "ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
    TensorNamePattern{Layer, "ffn.gate.tid2eid", "mlp.gate.tid2eid"},
    TensorNamePattern{Layer, "ffn.gate.bias_vl", ""},  // V4.1: router bias for image-span tokens

    // Routed experts: fused in transformers (gate_up_proj = [w1; w3] per expert, down_proj = w2).
    TensorNamePattern{Layer, "ffn.experts.{E}.w1.weight", "mlp.experts.gate_up_proj", true, 0, 2},
    TensorNamePattern{Layer, "ffn.experts.{E}.w3.weight", "mlp.experts.gate_up_proj", true, 1, 2},
    TensorNamePattern{Layer, "ffn.experts.{E}.w2.weight", "mlp.experts.down_proj", true, 0, 1},

    // Shared expert.
    TensorNamePattern{Layer, "ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight", true},
    TensorNamePattern{Layer, "ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight", true},
    TensorNamePattern{Layer, "ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight", true},

    // V4.1 Engram (layers 1 and 14): FP8 table with per-row scales [rows, head_dim / 32].
    TensorNamePattern{Layer, "engram.embed.weight", "", true},
    TensorNamePattern{Layer, "engram.wkv.weight", "", true},
    TensorNamePattern{Layer, "engram.q_weight", ""},
    TensorNamePattern{Layer, "engram.k_weight", ""},

    // MTP-only tensors around the MTP block (V4 `mtp.0`).
    TensorNamePattern{Mtp, "e_proj.weight", "", true},
    TensorNamePattern{Mtp, "h_proj.weight", "", true},
    TensorNamePattern{Mtp, "enorm.weight", ""},
    TensorNamePattern{Mtp, "hnorm.weight", ""},
    TensorNamePattern{Mtp, "norm.weight", ""},
    TensorNamePattern{Mtp, "hc_head_fn", ""},
    TensorNamePattern{Mtp, "hc_head_base", ""},
    TensorNamePattern{Mtp, "hc_head_scale", ""},
    // The DSpark drafter's (docs/MODELS.md): tap fusion on stage 0, heads on the last stage.
    TensorNamePattern{Mtp, "main_proj.weight", "", true},
    TensorNamePattern{Mtp, "main_norm.weight", ""},
    TensorNamePattern{Mtp, "markov_head.markov_w1.weight", ""},
    TensorNamePattern{Mtp, "markov_head.markov_w2.weight", ""},
    TensorNamePattern{Mtp, "confidence_head.proj.weight", ""},
    // The same two tables as DeepSeek's V4.1 inference code names them.
    TensorNamePattern{Mtp, "markov_head.embed.weight", ""},
    TensorNamePattern{Mtp, "markov_head.head.weight", ""},
};

constexpr std::string_view kExpertPlaceholder = "{E}";
constexpr std::string_view kTransformersLayerPrefix = "model.layers.";
constexpr std::string_view kTransformersModelPrefix = "model.";

// A non-negative decimal index without leading zeros ("0", "17"; not "01", "", "-1").
std::optional<int64_t> parse_index(std::string_view text) {
  if (text.empty() || text.size() > 9 || (text.size() > 1 && text[0] == '0')) return std::nullopt;
  int64_t value = 0;
  for (char digit : text) {
    if (digit < '0' || digit > '9') return std::nullopt;
    value = value * 10 + (digit - '0');
  }
  return value;
}

struct PatternMatch {
  bool matched = false;
  std::optional<int64_t> expert;
};

PatternMatch match_pattern(std::string_view pattern, std::string_view text) {
  const auto placeholder = pattern.find(kExpertPlaceholder);
  if (placeholder == std::string_view::npos) return {pattern == text, std::nullopt};
  const auto head = pattern.substr(0, placeholder);
  const auto tail = pattern.substr(placeholder + kExpertPlaceholder.size());
  if (text.size() < head.size() + tail.size() || !text.starts_with(head) || !text.ends_with(tail)) return {};
  const auto expert = parse_index(text.substr(head.size(), text.size() - head.size() - tail.size()));
  if (!expert) return {};
  return {true, expert};
}

std::string fill_expert(std::string_view pattern, std::optional<int64_t> expert) {
  std::string result(pattern);
  const auto placeholder = result.find(kExpertPlaceholder);
  if (placeholder != std::string::npos && expert)
    result.replace(placeholder, kExpertPlaceholder.size(), std::to_string(*expert));
  return result;
}

bool is_fused(const TensorNamePattern& pattern) {
  return pattern.canonical.find(kExpertPlaceholder) != std::string_view::npos &&
         pattern.transformers.find(kExpertPlaceholder) == std::string_view::npos;
}

// A canonical name split into its table row and the parts that the row leaves open.
struct CanonicalMatch {
  const TensorNamePattern* pattern = nullptr;
  std::string prefix;  // "", "layers.L." or "mtp.L."
  std::optional<int64_t> layer;
  std::optional<int64_t> expert;
};

// "<block_word>L.rest" split into L and rest.
struct Prefixed {
  int64_t index = 0;
  std::string_view rest;
};

std::optional<Prefixed> split_block_prefix(std::string_view name, std::string_view block_word) {
  if (!name.starts_with(block_word)) return std::nullopt;
  name.remove_prefix(block_word.size());
  const auto dot = name.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto index = parse_index(name.substr(0, dot));
  if (!index) return std::nullopt;
  return Prefixed{*index, name.substr(dot + 1)};
}

// Resolves a name spelled canonically. `allow_mtp` is false for transformers V4.1 names (the
// transformers classes drop MTP tensors).
std::optional<CanonicalMatch> match_canonical(std::string_view name, bool allow_mtp) {
  for (const auto& pattern : kPatterns)
    if (pattern.scope == Model && match_pattern(pattern.canonical, name).matched)
      return CanonicalMatch{&pattern, "", std::nullopt, std::nullopt};

  auto block = split_block_prefix(name, "layers.");
  const bool is_mtp = !block && allow_mtp && (block = split_block_prefix(name, "mtp."));
  if (!block) return std::nullopt;
  for (const auto& pattern : kPatterns) {
    if (pattern.scope == Model || (pattern.scope == Mtp && !is_mtp)) continue;
    const auto match = match_pattern(pattern.canonical, block->rest);
    if (!match.matched) continue;
    const std::string prefix = std::string(is_mtp ? "mtp." : "layers.") + std::to_string(block->index) + ".";
    return CanonicalMatch{&pattern, prefix, block->index, match.expert};
  }
  return std::nullopt;
}

std::string canonical_string(const CanonicalMatch& match) {
  return match.prefix + fill_expert(match.pattern->canonical, match.expert);
}

// Resolves a name in the transformers V4 spelling (module tree of DeepseekV4ForCausalLM).
std::optional<CanonicalName> match_transformers_v4(std::string_view name) {
  for (const auto& pattern : kPatterns)
    if (pattern.scope == Model && !pattern.transformers.empty() && pattern.transformers == name)
      return CanonicalName{std::string(pattern.canonical), NamingConvention::Transformers, {}};

  const auto block = split_block_prefix(name, kTransformersLayerPrefix);
  if (!block) return std::nullopt;
  const std::string prefix = "layers." + std::to_string(block->index) + ".";
  CanonicalName result{"", NamingConvention::Transformers, {}};
  for (const auto& pattern : kPatterns) {
    if (pattern.scope != Layer || pattern.transformers.empty()) continue;
    const auto match = match_pattern(pattern.transformers, block->rest);
    if (!match.matched) continue;
    if (is_fused(pattern)) {
      result.fused_parts.push_back({prefix + std::string(pattern.canonical), pattern.part, pattern.parts});
      continue;  // the other parts of the same stack follow in the table
    }
    result.name = prefix + fill_expert(pattern.canonical, match.expert);
    return result;
  }
  if (result.is_fused()) return result;
  return std::nullopt;
}

// The canonical spelling, bare or (DeepseekV41ForCausalLM) under "model."; its lm_head is
// covered by the V4 table row.
std::optional<CanonicalName> match_deepseek_spelling(std::string_view name) {
  if (const auto match = match_canonical(name, /*allow_mtp=*/true))
    return CanonicalName{canonical_string(*match), NamingConvention::DeepSeek, {}};
  if (name.starts_with(kTransformersModelPrefix)) {
    if (const auto match = match_canonical(name.substr(kTransformersModelPrefix.size()), /*allow_mtp=*/false))
      return CanonicalName{canonical_string(*match), NamingConvention::Transformers, {}};
  }
  return std::nullopt;
}

std::optional<CanonicalName> resolve_plain(std::string_view stored_name) {
  if (auto deepseek = match_deepseek_spelling(stored_name)) return deepseek;
  return match_transformers_v4(stored_name);
}

constexpr std::string_view kWeightSuffix = ".weight";
constexpr std::string_view kScaleSuffix = ".scale";
constexpr std::string_view kScaleInvSuffix = ".weight_scale_inv";

bool is_quantized_family(const std::string& canonical_weight) {
  const auto match = match_canonical(canonical_weight, /*allow_mtp=*/true);
  return match && match->pattern->quantized;
}

// The scale sibling of a quantized weight `X.weight`: `X.scale` in DeepSeek's spelling,
// `X.weight_scale_inv` from transformers' FP8 quantizer (and some converted dumps).
std::optional<CanonicalName> resolve_scale(std::string_view stored_name) {
  std::optional<CanonicalName> weight;
  if (stored_name.ends_with(kScaleInvSuffix)) {
    const auto stem = stored_name.substr(0, stored_name.size() - kScaleInvSuffix.size());
    weight = resolve_plain(std::string(stem) + std::string(kWeightSuffix));
  } else if (stored_name.ends_with(kScaleSuffix)) {
    const auto stem = stored_name.substr(0, stored_name.size() - kScaleSuffix.size());
    weight = match_deepseek_spelling(std::string(stem) + std::string(kWeightSuffix));
  }
  if (!weight || weight->is_fused() || !is_quantized_family(weight->name)) return std::nullopt;
  weight->name.replace(weight->name.size() - kWeightSuffix.size(), kWeightSuffix.size(), kScaleSuffix);
  return weight;
}

}  // namespace

std::span<const TensorNamePattern> tensor_name_patterns() { return kPatterns; }

std::optional<CanonicalName> canonical_tensor_name(std::string_view stored_name) {
  if (auto scale = resolve_scale(stored_name)) return scale;
  return resolve_plain(stored_name);
}

std::string expert_part_name(const FusedExpertPart& part, int64_t expert) {
  return fill_expert(part.canonical_pattern, expert);
}

std::optional<StoredLocation> transformers_tensor_location(std::string_view canonical_name) {
  bool is_scale = false;
  std::string weight_name(canonical_name);
  if (canonical_name.ends_with(kScaleSuffix)) {
    is_scale = true;
    weight_name = std::string(canonical_name.substr(0, canonical_name.size() - kScaleSuffix.size())) +
                  std::string(kWeightSuffix);
  }
  const auto match = match_canonical(weight_name, /*allow_mtp=*/true);
  if (!match || match->pattern->scope == Mtp || match->prefix.starts_with("mtp.")) return std::nullopt;
  if (is_scale && !match->pattern->quantized) return std::nullopt;

  // The first (current) table row for this canonical pattern gives the spelling.
  const TensorNamePattern* row = nullptr;
  for (const auto& pattern : kPatterns)
    if (pattern.scope == match->pattern->scope && pattern.canonical == match->pattern->canonical && pattern.current) {
      row = &pattern;
      break;
    }
  if (row == nullptr || row->transformers.empty()) return std::nullopt;

  std::string prefix = match->layer ? std::string(kTransformersLayerPrefix) + std::to_string(*match->layer) + "." : "";
  if (is_fused(*row)) {
    if (is_scale) return std::nullopt;  // fused stacks are dequantized by transformers
    return StoredLocation{prefix + std::string(row->transformers), ExpertSlice{*match->expert, row->part, row->parts}};
  }
  std::string name = prefix + fill_expert(row->transformers, match->expert);
  if (is_scale) name.replace(name.size() - kWeightSuffix.size(), kWeightSuffix.size(), kScaleInvSuffix);
  return StoredLocation{std::move(name), std::nullopt};
}

}  // namespace deepinfer

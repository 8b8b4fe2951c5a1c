// Expected checkpoint tensors. Names and Flash shapes: shared/docs/v4_arch.md §3.2 (V4; from the
// reference model.py module definitions and real tensor headers) and §3.4 (V4.1; converter list and
// reference port). Every shape below is written as a formula of the config; the V4-Flash values
// they must reproduce are in the §3.2 table, and the totals (284.3B V4-Flash, 551.9B V4.1-Flash
// without Engram tables) are checked by tests/io/checkpoint_schema_test.cpp.
#include "io/checkpoint_schema.h"

#include <string>

#include "core/int_math.h"
#include "core/error.h"

namespace deepinfer {

namespace {

const std::vector<DType> kFloat = {DType::BF16, DType::F32};
// mHC parameters, sinks, ape and router biases ship as F32 (§3.2, transformers _keep_in_fp32_modules).
const std::vector<DType> kFloat32 = {DType::F32, DType::BF16};


class SchemaBuilder {
 public:
  explicit SchemaBuilder(const ModelConfig& config) : c_(config) {}

  std::vector<ExpectedTensor> build() {
    const int64_t D = c_.hidden_size;
    add("embed.weight", {c_.vocab_size, D}, kFloat);
    if (!c_.tie_word_embeddings) add("head.weight", {c_.vocab_size, D}, kFloat);
    add("norm.weight", {D}, kFloat);
    // V4.1 collapses with the last site's `pre` and has no hc_head tensors (§2.10a, §3.4).
    if (c_.family == ModelFamily::V4) hc_head("", false);
    for (int64_t layer = 0; layer < c_.total_layers(); ++layer) {
      bool mtp = c_.is_mtp_layer(layer);
      std::string prefix = mtp ? str_cat("mtp.", layer - c_.num_layers, ".") : str_cat("layers.", layer, ".");
      block(prefix, layer, mtp);
      if (mtp && c_.dspark) dspark_extras(prefix, layer - c_.num_layers);
      else if (mtp && c_.family == ModelFamily::V4) mtp_extras(prefix);
    }
    return std::move(out_);
  }

 private:
  void add(std::string name, std::vector<int64_t> shape, const std::vector<DType>& dtypes, bool optional = false) {
    ExpectedTensor tensor;
    tensor.name = std::move(name);
    tensor.logical_shape = shape;
    tensor.stored_shape = std::move(shape);
    tensor.stored_dtypes = dtypes;
    tensor.optional = optional;
    out_.push_back(std::move(tensor));
  }

  void add_scale(std::string name, std::vector<int64_t> shape, bool optional) {
    add(std::move(name), std::move(shape), {DType::F8_E8M0}, optional);
    out_.back().is_scale = true;
  }

  // `prefix`.weight (+ `prefix`.scale) of an [out, in] linear stored in `format` (§3.3):
  // FP8: F8_E4M3 [out, in] + F8_E8M0 [ceil(out/rows), ceil(in/cols)];
  // FP4: I8 [out, in/2] (two e2m1 per byte) + F8_E8M0 [out, in/32]; BF16: one weight, no scale.
  void linear(const std::string& prefix, int64_t out, int64_t in, WeightFormat format, bool optional) {
    const Quantization& q = c_.quantization;
    switch (format) {
      case WeightFormat::BF16:
        add(prefix + ".weight", {out, in}, kFloat, optional);
        break;
      case WeightFormat::FP8:
        add(prefix + ".weight", {out, in}, {DType::F8_E4M3}, optional);
        add_scale(prefix + ".scale", {ceil_div(out, q.block_rows), ceil_div(in, q.block_cols)}, optional);
        break;
      case WeightFormat::FP4:
        add(prefix + ".weight", {out, in}, {DType::I8}, optional);
        out_.back().stored_shape = {out, in / 2};
        add_scale(prefix + ".scale", {out, in / 32}, optional);
        break;
    }
  }

  // V4.1 projections whose storage the docs do not state (compressor, index-key and Engram
  // projections): accept BF16 or FP8 and make the FP8 scale optional.
  void linear_unknown_format(const std::string& prefix, int64_t out, int64_t in, bool optional) {
    if (c_.quantization.dense_format == WeightFormat::BF16) return linear(prefix, out, in, WeightFormat::BF16, optional);
    add(prefix + ".weight", {out, in}, {DType::BF16, DType::F8_E4M3, DType::F32}, optional);
    add_scale(prefix + ".scale",
              {ceil_div(out, c_.quantization.block_rows), ceil_div(in, c_.quantization.block_cols)}, true);
  }

  void hc_head(const std::string& prefix, bool optional) {
    const int64_t n = c_.hc_mult;
    add(prefix + "hc_head_fn", {n, n * c_.hidden_size}, kFloat32, optional);
    add(prefix + "hc_head_base", {n}, kFloat32, optional);
    add(prefix + "hc_head_scale", {1}, kFloat32, optional);
  }

  // One mHC site: `fn` mixes the n*D flattened streams into (2+n)*n coefficients (n pre, n post,
  // n*n comb), `scale` has one entry per group (§2.2).
  void hc_site(const std::string& prefix, const std::string& site, bool optional) {
    const int64_t n = c_.hc_mult;
    const int64_t mix = (2 + n) * n;
    add(prefix + "hc_" + site + "_fn", {mix, n * c_.hidden_size}, kFloat32, optional);
    add(prefix + "hc_" + site + "_base", {mix}, kFloat32, optional);
    add(prefix + "hc_" + site + "_scale", {3}, kFloat32, optional);
  }

  void block(const std::string& prefix, int64_t layer, bool optional) {
    const int64_t D = c_.hidden_size;
    add(prefix + "attn_norm.weight", {D}, kFloat, optional);
    add(prefix + "ffn_norm.weight", {D}, kFloat, optional);
    hc_site(prefix, "attn", optional);
    hc_site(prefix, "ffn", optional);
    attention(prefix + "attn.", layer, optional);
    moe(prefix + "ffn.", layer, optional);
    if (c_.is_engram_layer(layer)) engram(prefix + "engram.", layer);
  }

  // §2.4 (V4) / §2.10b (V4.1): q low-rank, one shared KV head, grouped output projection.
  void attention(const std::string& p, int64_t layer, bool optional) {
    const int64_t D = c_.hidden_size;
    const int64_t heads_width = c_.num_heads * c_.head_dim;
    const int64_t groups_width = c_.o_groups * c_.o_lora_rank;
    const WeightFormat dense = c_.quantization.dense_format;
    linear(p + "wq_a", c_.q_lora_rank, D, dense, optional);
    add(p + "q_norm.weight", {c_.q_lora_rank}, kFloat, optional);
    linear(p + "wq_b", heads_width, c_.q_lora_rank, dense, optional);
    linear(p + "wkv", c_.num_kv_heads * c_.head_dim, D, dense, optional);
    add(p + "kv_norm.weight", {c_.head_dim}, kFloat, optional);
    // wo_a is [o_groups * o_lora_rank, heads_width / o_groups]: each group maps its heads' outputs.
    linear(p + "wo_a", groups_width, heads_width / c_.o_groups, dense, optional);
    linear(p + "wo_b", D, groups_width, dense, optional);
    add(p + "attn_sink", {c_.num_heads}, kFloat32, optional);
    if (c_.family == ModelFamily::V4) v4_compressed_branch(p, layer, optional);
    else v41_compressed_branch(p, layer, optional);
  }

  // §2.4.1 / §2.4.2: ratio 4 compresses with overlap (c = 2 halves per token) and has a lightning
  // indexer with its own overlapping compressor at index_head_dim; ratio 128 has c = 1, no indexer.
  void v4_compressed_branch(const std::string& p, int64_t layer, bool optional) {
    const int64_t D = c_.hidden_size;
    const int64_t ratio = c_.compress_ratio(layer);
    if (ratio == 0) return;
    const int64_t overlap = ratio == 4 ? 2 : 1;
    add(p + "compressor.wkv.weight", {overlap * c_.head_dim, D}, kFloat, optional);
    add(p + "compressor.wgate.weight", {overlap * c_.head_dim, D}, kFloat, optional);
    add(p + "compressor.ape", {ratio, overlap * c_.head_dim}, kFloat32, optional);
    add(p + "compressor.norm.weight", {c_.head_dim}, kFloat, optional);
    if (c_.attention_kind(layer) != AttentionKind::CompressedSparse) return;
    const int64_t idx = c_.index_head_dim;
    linear(p + "indexer.wq_b", c_.index_n_heads * idx, c_.q_lora_rank, c_.quantization.dense_format, optional);
    add(p + "indexer.weights_proj.weight", {c_.index_n_heads, D}, kFloat, optional);
    add(p + "indexer.compressor.wkv.weight", {overlap * idx, D}, kFloat, optional);
    add(p + "indexer.compressor.wgate.weight", {overlap * idx, D}, kFloat, optional);
    add(p + "indexer.compressor.ape", {ratio, overlap * idx}, kFloat32, optional);
    add(p + "indexer.compressor.norm.weight", {idx}, kFloat, optional);
  }

  // §2.10c-e, §3.4: kv sources own a compressor (no overlap, no ape; a gate only at ratio 2) and
  // the index-key projection of its latent; index sources own the indexer query and weights.
  void v41_compressed_branch(const std::string& p, int64_t layer, bool optional) {
    const int64_t D = c_.hidden_size;
    const int64_t idx = c_.index_head_dim;
    if (c_.is_kv_source(layer)) {
      linear_unknown_format(p + "compressor.wkv", c_.head_dim, D, optional);
      if (c_.compress_ratio(layer) > 1) linear_unknown_format(p + "compressor.wgate", c_.head_dim, D, optional);
      add(p + "compressor.norm.weight", {c_.head_dim}, kFloat, optional);
      linear_unknown_format(p + "indexer.wk", idx, c_.head_dim, optional);
      add(p + "indexer.k_norm.weight", {idx}, kFloat, optional);
    }
    if (c_.is_index_source(layer)) {
      linear(p + "indexer.wq_b", c_.index_n_heads * idx, c_.q_lora_rank, c_.quantization.dense_format, optional);
      add(p + "indexer.weights_proj.weight", {c_.index_n_heads, D}, kFloat, optional);
    }
  }

  // §2.5 / §2.10h: router, routed experts (FP4 in the releases), shared experts (FP8).
  void moe(const std::string& p, int64_t layer, bool optional) {
    const int64_t D = c_.hidden_size;
    const int64_t I = c_.moe_intermediate_size;
    const int64_t experts = c_.routed_experts_of(layer);
    add(p + "gate.weight", {experts, D}, kFloat, optional);
    if (c_.is_hash_moe_layer(layer)) {
      // One row of expert ids per vocabulary entry; I64 in the checkpoint, int32 in the reference.
      add(p + "gate.tid2eid", {c_.vocab_size, c_.num_experts_per_tok}, {DType::I64, DType::I32}, optional);
    } else {
      add(p + "gate.bias", {experts}, kFloat32, optional);
    }
    // V4.1 routes image-span tokens with a second bias; only multimodal checkpoints need it.
    if (c_.family == ModelFamily::V41) add(p + "gate.bias_vl", {experts}, kFloat32, true);
    for (int64_t e = 0; e < experts; ++e) {
      std::string expert = p + "experts." + std::to_string(e) + ".";
      linear(expert + "w1", I, D, c_.quantization.expert_format, optional);
      linear(expert + "w2", D, I, c_.quantization.expert_format, optional);
      linear(expert + "w3", I, D, c_.quantization.expert_format, optional);
    }
    if (c_.n_shared_experts > 0) {
      // The reference builds the shared experts as one MLP of width n_shared_experts * moe_inter_dim.
      const int64_t shared = c_.n_shared_experts * I;
      linear(p + "shared_experts.w1", shared, D, c_.quantization.dense_format, optional);
      linear(p + "shared_experts.w2", D, shared, c_.quantization.dense_format, optional);
      linear(p + "shared_experts.w3", shared, D, c_.quantization.dense_format, optional);
    }
  }

  // §2.10g, §3.3, §3.4: hashed table rows x head_dim (FP8 with one E8M0 scale per 32 columns of a
  // row when quantized), wkv maps the (max_ngram-1) * n_heads looked-up rows to hc_mult keys + one
  // value. Shapes come from one converter patch only, so every Engram entry is optional.
  void engram(const std::string& p, int64_t layer) {
    const EngramConfig& e = c_.engram;
    size_t slot = 0;
    while (e.layer_ids[slot] != layer) ++slot;
    const int64_t rows = e.num_embeddings[slot];
    const int64_t D = c_.hidden_size;
    if (c_.quantization.dense_format == WeightFormat::BF16) {
      add(p + "embed.weight", {rows, e.head_dim}, kFloat, true);
      // transformers' Engram embedding always owns its `scale` parameter, so save_pretrained
      // writes it in float checkpoints too, where it is unused (the float rows are exact).
      add(p + "embed.scale", {rows, ceil_div(e.head_dim, 32)}, kFloat, true);
      out_.back().is_scale = true;
    } else {
      add(p + "embed.weight", {rows, e.head_dim}, {DType::F8_E4M3}, true);
      add_scale(p + "embed.scale", {rows, ceil_div(e.head_dim, 32)}, true);
    }
    const int64_t lookups = (e.max_ngram_size - 1) * e.n_heads;
    linear_unknown_format(p + "wkv", (c_.hc_mult + 1) * D, lookups * e.head_dim, true);
    add(p + "q_weight", {c_.hc_mult, D}, kFloat, true);
    add(p + "k_weight", {c_.hc_mult, D}, kFloat, true);
  }

  // §2.7: the V4 MTP block's own input projections, norms and head mixing (optional: the
  // target model never needs them).
  void mtp_extras(const std::string& prefix) {
    const int64_t D = c_.hidden_size;
    linear(prefix + "e_proj", D, D, c_.quantization.dense_format, true);
    linear(prefix + "h_proj", D, D, c_.quantization.dense_format, true);
    add(prefix + "enorm.weight", {D}, kFloat, true);
    add(prefix + "hnorm.weight", {D}, kFloat, true);
    add(prefix + "norm.weight", {D}, kFloat, true);
    hc_head(prefix, true);
  }

  // The DSpark drafter's tensors around its stages (docs/MODELS.md, "DSpark drafter"): the fusion
  // of the target's taps on the first stage, the head, Markov and confidence heads on the last.
  void dspark_extras(const std::string& prefix, int64_t stage) {
    const int64_t D = c_.hidden_size;
    const int64_t taps = static_cast<int64_t>(c_.dspark->target_layer_ids.size());
    const int64_t rank = c_.dspark->markov_rank;
    if (stage == 0) {
      linear(prefix + "main_proj", D, taps * D, c_.quantization.dense_format, true);
      add(prefix + "main_norm.weight", {D}, kFloat, true);
    }
    if (stage != c_.num_mtp_layers - 1) return;
    add(prefix + "norm.weight", {D}, kFloat, true);
    // markov_w1 / markov_w2 (the engine ports) or embed / head (DeepSeek's V4.1 inference code).
    for (const char* name : {"markov_w1", "markov_w2", "embed", "head"})
      add(prefix + "markov_head." + name + ".weight", {c_.vocab_size, rank}, kFloat, true);
    add(prefix + "confidence_head.proj.weight", {1, D + rank}, kFloat, true);
    if (c_.family == ModelFamily::V4) hc_head(prefix, true);
  }

  const ModelConfig& c_;
  std::vector<ExpectedTensor> out_;
};

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config) { return SchemaBuilder(config).build(); }

int64_t logical_numel(const ExpectedTensor& tensor) {
  int64_t n = 1;
  for (int64_t d : tensor.logical_shape) n *= d;
  return n;
}

}  // namespace deepinfer

#pragma once
// One description of a DeepSeek V4 / V4.1 checkpoint's architecture, parsed from its config.json.
// Both DeepSeek's published layout and the layout transformers' save_pretrained writes parse into
// the same ModelConfig, so nothing downstream needs to know which one a checkpoint used.
// Field meanings and the Flash values: shared/docs/v4_arch.md §1; V4.1 layer roles: §2.10.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer {

enum class ModelFamily {
  V4,   // model_type deepseek_v4 (V4-Flash, V4-Pro): flat keys
  V41,  // model_type deepseek_v41: text parameters under text_config
};

// What the attention of one layer does beyond its own 128-token sliding window.
enum class AttentionKind {
  SlidingWindow,      // ratio 0: window only (both families; also every MTP / DSpark layer)
  CompressedSparse,   // V4 ratio 4 (CSA): own overlapping compressor + lightning indexer top-k
  HeavilyCompressed,  // V4 ratio 128 (HCA): own compressor, attends every visible entry
  SharedFull,         // V4.1 kv source: owns the compressor, index keys and its own top-k
  SharedReindex,      // V4.1 index source that is not a kv source: reuses KV, own indexer query
  SharedReuse,        // V4.1 other ratio > 0 layer: reuses KV and the latest top-k indices
};

enum class ScoringFunc { SqrtSoftplus, Softmax, Sigmoid };

enum class WeightFormat {
  BF16,  // unquantized: one BF16 (or F32) weight, no scale
  FP8,   // F8_E4M3 weight + F8_E8M0 `.scale`, one per block_rows x block_cols tile
  FP4,   // I8 holding two e2m1 per byte [out, in/2] + F8_E8M0 `.scale` [out, in/32] (routed experts)
};

struct Quantization {
  // FP8 means the checkpoint has a quantization_config; BF16 means it has none.
  WeightFormat dense_format = WeightFormat::BF16;
  WeightFormat expert_format = WeightFormat::BF16;
  int64_t block_rows = 0;  // weight_block_size[0]; 0 when unquantized
  int64_t block_cols = 0;  // weight_block_size[1]
  // Scales are power-of-two bytes (scale_fmt "ue8m0"), the only format DeepSeek ships.
  bool operator==(const Quantization&) const = default;
};

struct YarnScaling {
  double factor = 0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 0;
  double beta_slow = 0;
  bool operator==(const YarnScaling&) const = default;
};

struct EngramConfig {
  std::vector<int64_t> layer_ids;       // sorted, unique, < num_layers
  std::vector<int64_t> num_embeddings;  // table rows, one per engram layer
  int64_t max_ngram_size = 0;
  int64_t vocab_size = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  int64_t pad_token_id = 0;
  int64_t compressed_vocab_size = 0;
  bool operator==(const EngramConfig&) const = default;
};

struct DsparkConfig {
  int64_t block_size = 0;
  int64_t markov_rank = 0;
  int64_t noise_token_id = 0;
  std::vector<int64_t> target_layer_ids;
  int64_t n_routed_experts = 0;     // experts of each draft layer
  int64_t num_experts_per_tok = 0;  // top-k of each draft layer
  // Per-position STS temperatures of the confidence head (deepinfer's dspark_confidence_temperatures;
  // block_size entries, all 1 when absent): c_k = sigmoid(raw_k / T_k).
  std::vector<double> confidence_temperatures;
  bool operator==(const DsparkConfig&) const = default;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::V4;

  // --- shapes
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;      // decoder blocks, MTP / DSpark layers not counted
  int64_t num_mtp_layers = 0;  // num_nextn_predict_layers
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // always 1: one shared KV head, K == V
  int64_t head_dim = 0;
  int64_t rope_head_dim = 0;  // RoPE on the last rope_head_dim dims of each head
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;
  // One entry per layer, decoder layers then MTP layers (num_layers + num_mtp_layers entries).
  std::vector<int64_t> compress_ratios;

  // --- positions
  double rope_theta = 0;           // ratio-0 layers, no YaRN
  double compress_rope_theta = 0;  // ratio > 0 layers, with yarn when present
  std::optional<YarnScaling> yarn;
  int64_t max_position_embeddings = 0;

  // --- indexer
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;

  // --- hyper-connections and norms
  int64_t hc_mult = 0;
  int64_t hc_sinkhorn_iters = 0;
  double hc_eps = 0;
  double rms_norm_eps = 0;

  // --- MoE
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  ScoringFunc scoring_func = ScoringFunc::SqrtSoftplus;
  // topk_method must be "noaux_tc" (the bias only steers selection); no other method is accepted.
  bool norm_topk_prob = true;
  double routed_scaling_factor = 0;
  double gate_temperature = 1.0;  // V4.1 gate_temp divides router logits
  int64_t num_hash_layers = 0;    // layers 0..num_hash_layers-1 route by tid2eid (V4 only)
  double swiglu_limit = 0;

  // --- tokens
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  bool tie_word_embeddings = false;
  std::optional<int64_t> image_token_id;  // V4.1

  Quantization quantization;

  // --- V4.1 CSA2 sharing and Engram (empty / -1 for V4)
  std::vector<int64_t> kv_source_layer_ids;
  std::vector<int64_t> index_source_layer_ids;
  int64_t candidate_source_layer_id = -1;  // < 0 disables the hierarchical candidate pool
  int64_t candidate_topk_blocks = 0;
  int64_t candidate_block_size = 0;
  EngramConfig engram;

  std::optional<DsparkConfig> dspark;

  bool operator==(const ModelConfig&) const = default;

  // --- derived per-layer facts; `layer` counts decoder layers then MTP layers.
  int64_t total_layers() const { return num_layers + num_mtp_layers; }
  bool is_mtp_layer(int64_t layer) const;
  int64_t compress_ratio(int64_t layer) const;
  AttentionKind attention_kind(int64_t layer) const;
  // The compressed branch rotates with compress_rope_theta (+ yarn); ratio-0 layers with rope_theta.
  bool uses_compress_rope(int64_t layer) const { return compress_ratio(layer) > 0; }
  bool is_hash_moe_layer(int64_t layer) const;
  bool is_kv_source(int64_t layer) const;
  bool is_index_source(int64_t layer) const;
  bool is_engram_layer(int64_t layer) const;
  // The layer whose compressed KV (and index keys) `layer` attends to: itself for V4 ratio > 0
  // layers, the latest kv source at or before it for V4.1; -1 for window-only layers.
  int64_t kv_source_of(int64_t layer) const;
  // The layer whose top-k `layer` uses: itself for V4 CSA and V4.1 Full / Reindex layers, the latest
  // index source at or before it for V4.1 Reuse layers; -1 when the layer selects nothing (SWA, HCA).
  int64_t index_source_of(int64_t layer) const;
  // Experts of one layer: DSpark draft layers of V4.1 have their own expert count.
  int64_t routed_experts_of(int64_t layer) const;
};

// Reads a config.json document. `origin` names it in error messages (usually the file path).
// Throws deepinfer::Error naming the field (with its JSON path) when a field is missing, has the
// wrong type, is out of range, or contradicts another.
ModelConfig parse_model_config(const nlohmann::json& document, std::string_view origin);
// `path_or_dir` is a config.json file or a checkpoint directory holding one.
ModelConfig load_model_config(const std::string& path_or_dir);

// A few lines for `deepinfer inspect`: release guess, layers by kind, experts, quantization.
std::string describe(const ModelConfig& config);

std::string_view attention_kind_name(AttentionKind kind);

}  // namespace deepinfer

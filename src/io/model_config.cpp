#include "io/model_config.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "io/json_file.h"

namespace deepinfer {

namespace {

// The latest id in sorted `ids` that is <= layer, or -1.
int64_t latest_at_or_before(const std::vector<int64_t>& ids, int64_t layer) {
  auto it = std::upper_bound(ids.begin(), ids.end(), layer);
  return it == ids.begin() ? -1 : *std::prev(it);
}

bool sorted_contains(const std::vector<int64_t>& ids, int64_t layer) {
  return std::binary_search(ids.begin(), ids.end(), layer);
}

struct Release {
  const char* name;
  ModelFamily family;
  int64_t hidden, layers, heads, q_lora_rank, experts, moe_intermediate, o_groups;
};

// Published sizes: V4-Flash v4_arch §1.1, V4.1-Flash §1.3; V4-Pro from third-party model pages
// (glennklockwood.com/garden/DeepSeek-V4-Pro, apxml.com/models/deepseek-v4-pro: hidden 7168, 61
// layers, 128 heads, q_lora_rank 1536, 384 experts x 3072, 16 output groups), not from a config.json.
constexpr Release kReleases[] = {
    {"DeepSeek-V4-Flash", ModelFamily::V4, 4096, 43, 64, 1024, 256, 2048, 8},
    {"DeepSeek-V4-Pro", ModelFamily::V4, 7168, 61, 128, 1536, 384, 3072, 16},
    {"DeepSeek-V4.1-Flash", ModelFamily::V41, 5120, 40, 64, 1280, 384, 2304, 8},
};

std::string release_name(const ModelConfig& c) {
  for (const Release& r : kReleases)
    if (r.family == c.family && r.hidden == c.hidden_size && r.layers == c.num_layers && r.heads == c.num_heads &&
        r.q_lora_rank == c.q_lora_rank && r.experts == c.n_routed_experts &&
        r.moe_intermediate == c.moe_intermediate_size && r.o_groups == c.o_groups)
      return r.name;
  return c.family == ModelFamily::V4 ? "V4 family, custom size" : "V4.1 family, custom size";
}

std::string format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::BF16: return "BF16";
    case WeightFormat::FP8: return "FP8";
    case WeightFormat::FP4: return "FP4";
  }
  return "?";
}

}  // namespace

std::string_view attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::SlidingWindow: return "sliding-window";
    case AttentionKind::CompressedSparse: return "CSA";
    case AttentionKind::HeavilyCompressed: return "HCA";
    case AttentionKind::SharedFull: return "CSA2 full";
    case AttentionKind::SharedReindex: return "CSA2 reindex";
    case AttentionKind::SharedReuse: return "CSA2 reuse";
  }
  return "?";
}

bool ModelConfig::is_mtp_layer(int64_t layer) const { return layer >= num_layers && layer < total_layers(); }

int64_t ModelConfig::compress_ratio(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(compress_ratios.size()))
    fail("layer ", layer, " is out of range [0, ", compress_ratios.size(), ")");
  return compress_ratios[static_cast<size_t>(layer)];
}

AttentionKind ModelConfig::attention_kind(int64_t layer) const {
  int64_t ratio = compress_ratio(layer);
  if (ratio == 0) return AttentionKind::SlidingWindow;
  if (family == ModelFamily::V4) return ratio == 4 ? AttentionKind::CompressedSparse : AttentionKind::HeavilyCompressed;
  if (is_kv_source(layer)) return AttentionKind::SharedFull;
  if (is_index_source(layer)) return AttentionKind::SharedReindex;
  return AttentionKind::SharedReuse;
}

bool ModelConfig::is_hash_moe_layer(int64_t layer) const { return layer >= 0 && layer < num_hash_layers; }

bool ModelConfig::is_kv_source(int64_t layer) const { return sorted_contains(kv_source_layer_ids, layer); }

bool ModelConfig::is_index_source(int64_t layer) const { return sorted_contains(index_source_layer_ids, layer); }

bool ModelConfig::is_engram_layer(int64_t layer) const { return sorted_contains(engram.layer_ids, layer); }

// V4.1: "a consumer uses source max(s in kv_source_layers, s <= layer)" (v4_arch §2.10c, from the
// vLLM V4.1 attention layer and the vllm-neuron port); transformers' DeepseekV41TextConfig states
// the same rule ("every layer with ratio > 0 reads the cache of the closest source at or before it").
int64_t ModelConfig::kv_source_of(int64_t layer) const {
  if (compress_ratio(layer) == 0) return -1;
  if (family == ModelFamily::V4) return layer;
  return latest_at_or_before(kv_source_layer_ids, layer);
}

// V4.1 Reuse layers take "the latest top-k indices from the most recent Full/Reindex layer"
// (v4_arch §2.10c); Full and Reindex layers are index sources themselves.
int64_t ModelConfig::index_source_of(int64_t layer) const {
  int64_t ratio = compress_ratio(layer);
  if (ratio == 0) return -1;
  if (family == ModelFamily::V4) return ratio == 4 ? layer : -1;
  return latest_at_or_before(index_source_layer_ids, layer);
}

int64_t ModelConfig::routed_experts_of(int64_t layer) const {
  if (is_mtp_layer(layer) && dspark) return dspark->n_routed_experts;
  return n_routed_experts;
}

ModelConfig load_model_config(const std::string& path_or_dir) {
  std::filesystem::path path(path_or_dir);
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) path /= "config.json";
  return parse_model_config(read_json_file(path.string()), path.string());
}

std::string describe(const ModelConfig& c) {
  std::ostringstream out;
  out << release_name(c) << " (" << (c.family == ModelFamily::V4 ? "deepseek_v4" : "deepseek_v41") << ")\n";

  // Count layers of each kind in the order they first appear.
  std::vector<std::pair<AttentionKind, int64_t>> kinds;
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    AttentionKind kind = c.attention_kind(layer);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& entry) { return entry.first == kind; });
    if (it == kinds.end()) kinds.emplace_back(kind, 1);
    else ++it->second;
  }
  out << "layers: " << c.num_layers << " (";
  for (size_t i = 0; i < kinds.size(); ++i)
    out << (i ? ", " : "") << kinds[i].second << " " << attention_kind_name(kinds[i].first);
  out << ")";
  if (c.num_mtp_layers > 0) out << " + " << c.num_mtp_layers << (c.dspark ? " DSpark" : " MTP");
  if (c.num_hash_layers > 0) out << "; " << c.num_hash_layers << " hash-routed";
  if (!c.engram.layer_ids.empty()) out << "; " << c.engram.layer_ids.size() << " Engram";
  out << "\n";

  out << "hidden " << c.hidden_size << ", " << c.num_heads << " heads x " << c.head_dim << " (rope "
      << c.rope_head_dim << "), q_lora_rank " << c.q_lora_rank << ", vocab " << c.vocab_size << "\n";
  out << "experts: " << c.n_routed_experts << " routed (top " << c.num_experts_per_tok << ") + "
      << c.n_shared_experts << " shared, intermediate " << c.moe_intermediate_size << "\n";
  const Quantization& q = c.quantization;
  if (q.dense_format == WeightFormat::BF16) {
    out << "quantization: none (BF16)\n";
  } else {
    out << "quantization: FP8 e4m3, " << q.block_rows << "x" << q.block_cols << " blocks, ue8m0 scales; experts "
        << format_name(q.expert_format) << "\n";
  }
  return out.str();
}

}  // namespace deepinfer

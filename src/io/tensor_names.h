#pragma once
// Checkpoint tensor names. deepinfer's canonical names are the names DeepSeek's released
// checkpoints use (`embed.weight`, `layers.3.attn.wq_a.weight` + sibling `.scale`,
// `layers.3.ffn.experts.17.w1.weight`, `mtp.0.e_proj.weight`, ...; v4_arch.md §3.2, §3.4).
// Checkpoints written by Hugging Face transformers use the module names of its model classes
// instead; this file maps both spellings onto the canonical one.
//
// Sources of the transformers names (read, not copied):
//  * DeepseekV4ForCausalLM module tree: huggingface/transformers
//    src/transformers/models/deepseek_v4/modeling_deepseek_v4.py @ 361455895daf94ca66f78cf6792b09af397b4b30
//    (indexer `weights_proj` directly on the indexer).
//  * Its checkpoint conversion rules, "deepseek_v4" in src/transformers/conversion_mapping.py, as
//    carried by the fork kvcache-ai/transformers @ 46da1fcfcf4c5d4ffbfd5c9a43d1d393a7ef513b (newer:
//    the indexer's `weights_proj` moved under `scorer.`; both spellings are accepted). Routed
//    experts are FUSED there: `mlp.experts.gate_up_proj` [E, 2*I, H] = per expert [w1; w3] and
//    `mlp.experts.down_proj` [E, H, I] = per expert w2. The FP8 quantizer renames `.scale` to
//    `.weight_scale_inv`.
//  * DeepseekV41ForCausalLM: huggingface/transformers
//    src/transformers/models/deepseek_v41/modeling_deepseek_v41.py @ 0a2080b43eb64e6d448186a4f3f0bc9c618f4797
//    keeps DeepSeek's module names under a `model.` prefix, with `lm_head.weight` for `head.weight`.
// transformers drops `mtp.*` on load (V4 and V4.1), so MTP tensors have only the canonical spelling.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

enum class NamingConvention {
  DeepSeek,      // canonical: the released checkpoints' own names
  Transformers,  // module names of DeepseekV4ForCausalLM / DeepseekV41ForCausalLM
};

// Where a tensor family lives; the layer index L is part of the prefix, not of the pattern.
enum class TensorScope {
  Model,  // whole name, e.g. "embed.weight"
  Layer,  // after "layers.L." (and after "mtp.L.": an MTP block is a full decoder layer)
  Mtp,    // only after "mtp.L." (MTP-only tensors such as e_proj)
};

// One row of the naming table. Patterns may contain "{E}" for a routed-expert index. When the
// canonical pattern has "{E}" and the transformers pattern has not, the transformers tensor is a
// fused stack [num_experts, parts * rows, cols] and expert E's canonical matrix is row block
// `part` of stored[E].
struct TensorNamePattern {
  TensorScope scope;
  std::string_view canonical;
  std::string_view transformers;  // V4 spelling; empty when transformers has no such tensor
  bool quantized = false;         // may come with a `.scale` sibling (FP8 or FP4 weight)
  int part = 0;
  int parts = 1;
  bool current = true;  // false: an older transformers spelling, accepted but never produced
};

// The whole table (canonical -> transformers), for listing and for tests.
std::span<const TensorNamePattern> tensor_name_patterns();

// One canonical tensor inside a fused expert stack: for expert e it is
// stored[e, part * rows : (part + 1) * rows, :] with rows = stored.shape[1] / parts.
struct FusedExpertPart {
  std::string canonical_pattern;  // the canonical name with "{E}" in place of the expert index
  int part = 0;
  int parts = 1;
};

struct CanonicalName {
  std::string name;  // the canonical name; empty for a fused expert stack (see fused_parts)
  NamingConvention convention = NamingConvention::DeepSeek;  // how the stored name was spelled
  std::vector<FusedExpertPart> fused_parts;                 // non-empty only for a fused expert stack
  bool is_fused() const { return !fused_parts.empty(); }
};

// Maps a stored tensor name (either convention; FP8 scales as `.scale` or `.weight_scale_inv`) to
// its canonical name. nullopt for names deepinfer does not know: the caller reports them.
std::optional<CanonicalName> canonical_tensor_name(std::string_view stored_name);

// The canonical name of expert `expert` for one part of a fused stack.
std::string expert_part_name(const FusedExpertPart& part, int64_t expert);

struct ExpertSlice {
  int64_t expert = 0;  // index along the stored tensor's first dimension
  int part = 0;        // row block of that expert's matrix
  int parts = 1;       // equal row blocks the matrix is split into
};

// Where a canonical tensor is stored in a DeepseekV4ForCausalLM (transformers) checkpoint.
struct StoredLocation {
  std::string name;
  std::optional<ExpertSlice> slice;  // set when the canonical tensor is part of a fused expert stack
};

// The transformers (V4) spelling of a canonical name; nullopt if the name is not canonical or
// transformers has no such tensor (MTP, V4.1-only families, scales of fused experts).
std::optional<StoredLocation> transformers_tensor_location(std::string_view canonical_name);

}  // namespace deepinfer

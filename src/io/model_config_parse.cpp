// config.json -> ModelConfig for both families and both layouts (DeepSeek's published config.json
// and what transformers' save_pretrained writes for DeepseekV4Config / DeepseekV41Config).
// Layout facts come from huggingface/transformers configuration_deepseek_v4.py @ b5b741e5 (same
// content @ 015c0781) and configuration_deepseek_v41.py; values from shared/docs/v4_arch.md §1.
//
// Required vs optional: every field that decides a tensor shape or the layer schedule is required.
// Scalars with a default in the transformers config class are optional and take that default
// (named per field below); save_pretrained writes them all anyway.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "io/json_fields.h"
#include "io/model_config.h"

namespace deepinfer {

namespace {

// Caps that keep a hostile config from making the engine (or expected_tensors) allocate without
// bound. Each is far above every release (V4-Pro: 61 layers, 384 experts, hidden 7168).
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxMtpLayers = 16;
constexpr int64_t kMaxExperts = 4096;
// layers x experts bounds the number of expert tensors the schema lists (six per expert with
// scales); V4-Pro has 62 x 384 = 23808.
constexpr int64_t kMaxExpertInstances = 65536;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxWidth = 65536;  // hidden, ranks, intermediate sizes
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxHcMult = 64;
constexpr int64_t kMaxSinkhornIters = 10000;
constexpr int64_t kMaxPositions = int64_t{1} << 40;
constexpr int64_t kMaxRatio = int64_t{1} << 20;
constexpr int64_t kMaxEngramRows = int64_t{1} << 40;
constexpr int64_t kMaxBlock = 4096;
constexpr double kHuge = 1e300;

constexpr std::string_view kSliding = "sliding_attention";
constexpr std::string_view kCsaType = "compressed_sparse_attention";
constexpr std::string_view kHcaType = "heavily_compressed_attention";
constexpr std::string_view kSharedCompressed = "shared_compressed_attention";

std::string join(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += str_cat(i ? ", " : "", values[i]);
  return out + "]";
}

bool contains(const std::vector<int64_t>& values, int64_t value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

// Two places may state the same value (e.g. rope_theta and rope_parameters.main.rope_theta);
// when both do they must agree.
template <typename T>
std::optional<T> agree(const JsonFields& a_fields, std::string_view a_key, std::optional<T> a,
                       const JsonFields& b_fields, std::string_view b_key, std::optional<T> b) {
  if (a && b && *a != *b)
    a_fields.fail_field(a_key, str_cat("= ", *a, " contradicts `", b_fields.path(b_key), "` = ", *b));
  return a ? a : b;
}

class Parser {
 public:
  Parser(const nlohmann::json& document, std::string_view origin) : top_(document, std::string(origin), "") {
    if (!document.is_object())
      fail(origin, ": config must be a JSON object, got a JSON ", document.type_name());
  }

  ModelConfig parse() {
    read_family();
    read_shapes();
    read_rope();
    read_schedule();
    read_moe();
    read_tokens();
    read_quantization();
    if (config_.family == ModelFamily::V41) {
      read_sources();
      read_engram();
    } else {
      reject_v41_only_fields();
    }
    read_dspark();
    check_cross_field_rules();
    return config_;
  }

 private:
  const JsonFields& text() const { return text_ ? *text_ : top_; }
  bool v41() const { return config_.family == ModelFamily::V41; }

  void read_family() {
    auto model_type = top_.string("model_type");
    if (!model_type) top_.fail_missing("model_type");
    if (*model_type == "deepseek_v4") {
      config_.family = ModelFamily::V4;
    } else if (*model_type == "deepseek_v41" || *model_type == "deepseek_v41_text") {
      config_.family = ModelFamily::V41;
      // DeepseekV41Config nests the text parameters; a flat deepseek_v41_text config does not
      // (transformers accepts both).
      text_ = top_.object("text_config");
    } else {
      top_.fail_field("model_type", str_cat("= \"", *model_type,
                                            "\" is not a supported model type (deepseek_v4, deepseek_v41)"));
    }
    if (auto architectures = top_.strings("architectures")) {
      for (const std::string& name : *architectures) {
        bool says_v41 = name.rfind("DeepseekV41", 0) == 0;
        bool says_v4 = !says_v41 && name.rfind("DeepseekV4", 0) == 0;
        if ((says_v41 && !v41()) || (says_v4 && v41()))
          top_.fail_field("architectures", str_cat("names ", name, ", which contradicts `model_type` = \"",
                                                   *model_type, "\""));
      }
    }
  }

  void read_shapes() {
    const JsonFields& t = text();
    config_.vocab_size = t.required_integer("vocab_size", 1, kMaxVocab);
    config_.hidden_size = t.required_integer("hidden_size", 1, kMaxWidth);
    config_.num_layers = t.required_integer("num_hidden_layers", 1, kMaxLayers);
    // Default: transformers num_nextn_predict_layers (V4: 1, V4.1: 3).
    config_.num_mtp_layers = t.integer("num_nextn_predict_layers", 0, kMaxMtpLayers).value_or(v41() ? 3 : 1);
    config_.num_heads = t.required_integer("num_attention_heads", 1, kMaxHeads);
    // Default 1 (transformers); the architecture has one KV head shared by all query heads, and
    // wkv is [head_dim, hidden] (v4_arch §2.4), so no other value can load.
    config_.num_kv_heads = t.integer("num_key_value_heads", 1, kMaxHeads).value_or(1);
    if (config_.num_kv_heads != 1)
      t.fail_field("num_key_value_heads", str_cat("= ", config_.num_kv_heads,
                                                  " is unsupported: DeepSeek V4 attention has one shared KV head"));
    config_.head_dim = t.required_integer("head_dim", 1, kMaxHeadDim);
    config_.q_lora_rank = t.required_integer("q_lora_rank", 1, kMaxWidth);
    config_.o_groups = t.required_integer("o_groups", 1, kMaxHeads);
    config_.o_lora_rank = t.required_integer("o_lora_rank", 1, kMaxWidth);
    // Default 128 (transformers and the reference ModelArgs.window_size agree).
    config_.sliding_window = t.integer("sliding_window", 1, kMaxPositions).value_or(128);
    // Default 1048576 (transformers, both families).
    config_.max_position_embeddings = t.integer("max_position_embeddings", 1, kMaxPositions).value_or(1048576);
    config_.index_n_heads = t.required_integer("index_n_heads", 1, kMaxHeads);
    config_.index_head_dim = t.required_integer("index_head_dim", 1, kMaxHeadDim);
    config_.index_topk = t.required_integer("index_topk", 1, kMaxPositions);
    config_.hc_mult = t.required_integer("hc_mult", 1, kMaxHcMult);
    // Defaults 20 and 1e-6 (transformers and reference ModelArgs agree).
    config_.hc_sinkhorn_iters = t.integer("hc_sinkhorn_iters", 1, kMaxSinkhornIters).value_or(20);
    config_.hc_eps = t.number("hc_eps", 0, 1).value_or(1e-6);
    // Default: transformers (V4 1e-6; V4.1 1e-20, which is not a typo, v4_arch §1.3).
    config_.rms_norm_eps = t.number("rms_norm_eps", 0, 1).value_or(v41() ? 1e-20 : 1e-6);
    if (auto act = t.string("hidden_act"); act && *act != "silu")
      t.fail_field("hidden_act", str_cat("= \"", *act, "\" is unsupported (only silu)"));
  }

  // RoPE appears as DeepSeek's qk_rope_head_dim / rope_theta / compress_rope_theta / rope_scaling,
  // and as transformers' partial_rotary_factor and rope_parameters {main, compress}. Every form
  // given must agree; one of them is required for each value.
  void read_rope() {
    const JsonFields& t = text();
    std::optional<JsonFields> main, compress, flat;
    if (auto parameters = t.object("rope_parameters")) {
      main = parameters->object("main");
      compress = parameters->object("compress");
      // A flat rope_parameters (no main / compress) is the compress branch's scaling, as
      // DeepseekV4Config.__post_init__ treats it.
      if (!main && !compress) flat = parameters;
    }

    // Each place that states the rope width, as (fields, key, rope dims); they must all agree.
    std::optional<int64_t> rope;
    const JsonFields* rope_fields = nullptr;
    std::string rope_key;
    auto consider = [&](const JsonFields& fields, std::string_view key, std::optional<int64_t> dims) {
      if (!dims) return;
      if (rope && *rope != *dims)
        fields.fail_field(key, str_cat("gives ", *dims, " rope dims, contradicting `", rope_fields->path(rope_key),
                                       "` (", *rope, " rope dims)"));
      if (!rope) {
        rope = dims;
        rope_fields = &fields;
        rope_key = std::string(key);
      }
    };
    auto from_factor = [&](const JsonFields& fields) -> std::optional<int64_t> {
      auto factor = fields.number("partial_rotary_factor", 0, 1);
      if (!factor) return std::nullopt;
      // transformers: qk_rope_head_dim = int(head_dim * partial_rotary_factor).
      return static_cast<int64_t>(std::floor(static_cast<double>(config_.head_dim) * *factor + 1e-9));
    };
    consider(t, "qk_rope_head_dim", t.integer("qk_rope_head_dim", 0, kMaxHeadDim));
    consider(t, "partial_rotary_factor", from_factor(t));
    if (main) consider(*main, "partial_rotary_factor", from_factor(*main));
    if (compress) consider(*compress, "partial_rotary_factor", from_factor(*compress));
    if (!rope) t.fail_missing("qk_rope_head_dim");
    config_.rope_head_dim = *rope;
    if (config_.rope_head_dim > config_.head_dim)
      t.fail_field("qk_rope_head_dim", str_cat("= ", config_.rope_head_dim, " exceeds `", t.path("head_dim"),
                                               "` = ", config_.head_dim));
    if (config_.rope_head_dim < 2 || config_.rope_head_dim % 2 != 0)
      t.fail_field("qk_rope_head_dim", str_cat("= ", config_.rope_head_dim,
                                               " must be a positive even number (RoPE rotates pairs)"));

    auto theta = t.number("rope_theta", 1e-30, kHuge);
    if (main) theta = agree(t, "rope_theta", theta, *main, "rope_theta", main->number("rope_theta", 1e-30, kHuge));
    if (!theta) t.fail_missing("rope_theta");
    config_.rope_theta = *theta;
    if (main && read_yarn(*main)) main->fail_field("rope_type", "= yarn is unsupported: the window rope has no YaRN");

    auto compress_theta = t.number("compress_rope_theta", 1e-30, kHuge);
    if (compress)
      compress_theta = agree(t, "compress_rope_theta", compress_theta, *compress, "rope_theta",
                             compress->number("rope_theta", 1e-30, kHuge));
    if (!compress_theta) t.fail_missing("compress_rope_theta");
    config_.compress_rope_theta = *compress_theta;

    std::optional<YarnScaling> yarn;
    std::string yarn_path;
    for (const std::optional<JsonFields>& source : {t.object("rope_scaling"), compress, flat}) {
      if (!source) continue;
      auto found = read_yarn(*source);
      if (yarn && found && !(*yarn == *found))
        source->fail_field("factor", str_cat("(with beta_fast, beta_slow, original_max_position_embeddings) ",
                                             "contradicts the YaRN parameters at `", yarn_path, "`"));
      if (found && !yarn) {
        yarn = found;
        yarn_path = source->path("factor");
      }
    }
    config_.yarn = yarn;
  }

  // A rope dict's YaRN parameters; nullopt for plain ("default") RoPE.
  std::optional<YarnScaling> read_yarn(const JsonFields& fields) {
    auto type = fields.string("rope_type");
    std::string_view type_key = "rope_type";
    if (!type) {
      type = fields.string("type");
      type_key = "type";
    }
    if (!type || *type == "default") return std::nullopt;
    if (*type != "yarn") fields.fail_field(type_key, str_cat("= \"", *type, "\" is unsupported (default or yarn)"));
    YarnScaling yarn;
    yarn.factor = fields.required_number("factor", 1e-30, kHuge);
    yarn.original_max_position_embeddings = fields.required_integer("original_max_position_embeddings", 1, kMaxPositions);
    // Defaults 32 / 1: the reference ModelArgs and transformers' YaRN defaults agree.
    yarn.beta_fast = fields.number("beta_fast", -kHuge, kHuge).value_or(32);
    yarn.beta_slow = fields.number("beta_slow", -kHuge, kHuge).value_or(1);
    return yarn;
  }

  // Per-layer compress ratios from DeepSeek's compress_ratios and / or transformers' layer_types
  // (+ compress_rates for V4).
  void read_schedule() {
    const JsonFields& t = text();
    const int64_t n = config_.num_layers;
    const int64_t total = config_.total_layers();
    auto ratios = t.integers("compress_ratios", 0, kMaxRatio);
    auto layer_types = t.strings("layer_types");

    if (ratios) {
      // V4-Flash: 44 entries for 43 layers + 1 MTP; V4.1-Flash: 43 for 40 + 3 (v4_arch §1.1, §1.3).
      if (static_cast<int64_t>(ratios->size()) != total)
        t.fail_field("compress_ratios", str_cat("has ", ratios->size(), " entries, expected num_hidden_layers + ",
                                                "num_nextn_predict_layers = ", n, " + ", config_.num_mtp_layers));
      for (size_t i = 0; i < ratios->size(); ++i) check_ratio(t, str_cat("compress_ratios[", i, "]"), (*ratios)[i]);
      // MTP / DSpark layers are window-only (v4_arch §2.7, §2.10i; transformers pads them with 0).
      for (int64_t i = n; i < total; ++i)
        if ((*ratios)[i] != 0)
          t.fail_field(str_cat("compress_ratios[", i, "]"),
                       str_cat("= ", (*ratios)[i], " but MTP layers are sliding-window only (ratio 0)"));
    }

    if (layer_types && static_cast<int64_t>(layer_types->size()) != n)
      t.fail_field("layer_types", str_cat("has ", layer_types->size(), " entries, expected num_hidden_layers = ", n));

    if (!v41()) {
      std::vector<int64_t> from_types;
      if (layer_types) from_types = v4_ratios_from_layer_types(*layer_types);
      if (ratios && layer_types) {
        for (int64_t i = 0; i < n; ++i)
          if ((*ratios)[i] != from_types[i])
            t.fail_field(str_cat("layer_types[", i, "]"),
                         str_cat("= \"", (*layer_types)[i], "\" (ratio ", from_types[i], ") contradicts `",
                                 t.path(str_cat("compress_ratios[", i, "]")), "` = ", (*ratios)[i]));
      }
      if (!ratios && !layer_types) t.fail_missing("compress_ratios");
      if (!ratios) {
        ratios = from_types;
        ratios->resize(total, 0);  // transformers drops MTP entries; MTP layers are ratio 0
      }
    } else {
      // transformers always writes compress_ratios for V4.1; its layer_types only mark kv sources
      // and are checked against kv_source_layer_ids in read_sources().
      if (!ratios) t.fail_missing("compress_ratios");
      if (layer_types) {
        for (size_t i = 0; i < layer_types->size(); ++i) {
          const std::string& type = (*layer_types)[i];
          if (type != kSliding && type != kSharedCompressed)
            t.fail_field(str_cat("layer_types[", i, "]"),
                         str_cat("= \"", type, "\" is not a V4.1 layer type (", kSliding, ", ", kSharedCompressed, ")"));
        }
        v41_layer_types_ = layer_types;
      }
    }
    config_.compress_ratios = *ratios;
  }

  std::vector<int64_t> v4_ratios_from_layer_types(const std::vector<std::string>& layer_types) {
    const JsonFields& t = text();
    // Defaults: transformers default_compress_rates {CSA: 4, HCA: 128}; legacy scalar keys fold in.
    int64_t csa = 4, hca = 128;
    if (auto rates = t.object("compress_rates")) {
      csa = rates->integer(kCsaType, 1, kMaxRatio).value_or(csa);
      hca = rates->integer(kHcaType, 1, kMaxRatio).value_or(hca);
    }
    csa = t.integer("compress_rate_csa", 1, kMaxRatio).value_or(csa);
    hca = t.integer("compress_rate_hca", 1, kMaxRatio).value_or(hca);
    // The ratio alone tells the layer kinds apart downstream (ModelConfig::attention_kind).
    if (csa != 4) t.fail_field("compress_rates.compressed_sparse_attention", str_cat("= ", csa, " must be 4 (the reference ties CSA's overlapping compressor and indexer to ratio 4)"));
    if (hca == 4) t.fail_field("compress_rates.heavily_compressed_attention", "= 4 would make HCA layers CSA layers");
    std::vector<int64_t> result;
    for (size_t i = 0; i < layer_types.size(); ++i) {
      const std::string& type = layer_types[i];
      std::string key = str_cat("layer_types[", i, "]");
      if (type == kSliding) {
        result.push_back(0);
      } else if (type == kCsaType) {
        result.push_back(csa);
      } else if (type == kHcaType) {
        result.push_back(hca);
      } else {
        t.fail_field(key, str_cat("= \"", type, "\" is not a V4 layer type (", kSliding, ", ", kCsaType, ", ",
                                  kHcaType, ")"));
      }
      check_ratio(t, key, result.back());
    }
    return result;
  }

  // V4's reference ties the overlapping compressor and the indexer to ratio 4 (CSA); every other
  // positive ratio is a plain heavily compressed layer (128 in the releases; small ratios such as 8
  // appear in test models so that short prompts reach the compressor) (v4_arch §2.4.1). A ratio of 1
  // would compress nothing. V4.1's compressor exists for ratios 1 and 2 (§2.10d).
  void check_ratio(const JsonFields& fields, const std::string& key, int64_t ratio) const {
    bool ok = v41() ? (ratio == 0 || ratio == 1 || ratio == 2) : (ratio == 0 || ratio >= 2);
    if (!ok)
      fields.fail_field(key, str_cat("= ", ratio, " is not a ", v41() ? "V4.1" : "V4", " compress ratio (",
                                     v41() ? "0, 1, 2" : "0 for sliding window, 4 for CSA, another ratio >= 2 for HCA",
                                     ")"));
  }

  void read_moe() {
    const JsonFields& t = text();
    config_.n_routed_experts = t.required_integer("n_routed_experts", 1, kMaxExperts);
    config_.n_shared_experts = t.required_integer("n_shared_experts", 0, 64);
    config_.num_experts_per_tok = t.required_integer("num_experts_per_tok", 1, kMaxExperts);
    config_.moe_intermediate_size = t.required_integer("moe_intermediate_size", 1, kMaxWidth);
    // Defaults: transformers (both families) sqrtsoftplus / noaux_tc / true / 1.5 / 10.0 / gate_temp 1.0.
    std::string scoring = t.string("scoring_func").value_or("sqrtsoftplus");
    if (scoring == "sqrtsoftplus") config_.scoring_func = ScoringFunc::SqrtSoftplus;
    else if (scoring == "softmax") config_.scoring_func = ScoringFunc::Softmax;
    else if (scoring == "sigmoid") config_.scoring_func = ScoringFunc::Sigmoid;
    else t.fail_field("scoring_func", str_cat("= \"", scoring, "\" is unsupported (sqrtsoftplus, softmax, sigmoid)"));
    if (auto method = t.string("topk_method"); method && *method != "noaux_tc")
      t.fail_field("topk_method", str_cat("= \"", *method, "\" is unsupported (only noaux_tc)"));
    config_.norm_topk_prob = t.boolean("norm_topk_prob").value_or(true);
    config_.routed_scaling_factor = t.number("routed_scaling_factor", -kHuge, kHuge).value_or(1.5);
    config_.gate_temperature = t.number("gate_temp", 1e-30, kHuge).value_or(1.0);
    config_.swiglu_limit = t.number("swiglu_limit", 0, kHuge).value_or(10.0);
    read_hash_layers();
  }

  void read_hash_layers() {
    const JsonFields& t = text();
    auto count = t.integer("num_hash_layers", 0, kMaxLayers);
    std::optional<int64_t> from_types;
    if (auto types = t.strings("mlp_layer_types")) {
      if (static_cast<int64_t>(types->size()) != config_.num_layers)
        t.fail_field("mlp_layer_types", str_cat("has ", types->size(), " entries, expected num_hidden_layers = ",
                                                config_.num_layers));
      int64_t hash = 0;
      for (size_t i = 0; i < types->size(); ++i) {
        const std::string& type = (*types)[i];
        std::string key = str_cat("mlp_layer_types[", i, "]");
        if (type == "hash_moe") {
          // The reference routes by tid2eid in the first n_hash_layers layers only.
          if (hash != static_cast<int64_t>(i))
            t.fail_field(key, "= \"hash_moe\" after a \"moe\" layer; hash layers must come first");
          ++hash;
        } else if (type != "moe") {
          t.fail_field(key, str_cat("= \"", type, "\" is not an MLP layer type (hash_moe, moe)"));
        }
      }
      from_types = hash;
    }
    count = agree(t, "num_hash_layers", count, t, "mlp_layer_types (hash_moe count)", from_types);
    if (v41()) {
      if (count && *count > 0)
        t.fail_field(count == from_types ? "mlp_layer_types" : "num_hash_layers",
                     "has hash-routed layers, which V4.1 does not have (v4_arch §1.3)");
      config_.num_hash_layers = 0;
      return;
    }
    // Required for V4: transformers defaults to 3 but the reference ModelArgs to 0.
    if (!count) t.fail_missing("num_hash_layers");
    if (*count > config_.num_layers)
      t.fail_field("num_hash_layers", str_cat("= ", *count, " exceeds num_hidden_layers = ", config_.num_layers));
    config_.num_hash_layers = *count;
  }

  void read_tokens() {
    const JsonFields& t = text();
    const int64_t last_id = config_.vocab_size - 1;
    // Defaults: transformers V4 bos 0 / eos 1; V4.1 bos None / eos 1.
    auto bos = agree(t, "bos_token_id", t.integer("bos_token_id", 0, last_id), top_, "bos_token_id",
                     text_ ? top_.integer("bos_token_id", 0, last_id) : std::nullopt);
    config_.bos_token_id = bos ? bos : (v41() ? std::nullopt : std::optional<int64_t>(0));
    auto eos = t.integer_or_integers("eos_token_id", 0, last_id);
    if (!eos && text_) eos = top_.integer_or_integers("eos_token_id", 0, last_id);
    config_.eos_token_ids = eos.value_or(std::vector<int64_t>{1});
    auto tie = agree(t, "tie_word_embeddings", t.boolean("tie_word_embeddings"), top_, "tie_word_embeddings",
                     text_ ? top_.boolean("tie_word_embeddings") : std::nullopt);
    config_.tie_word_embeddings = tie.value_or(false);
    // DeepseekV41Config.image_token_id lives at the top level (default 129264 there; no default
    // here because a text-only checkpoint has no image token).
    config_.image_token_id = top_.integer("image_token_id", 0, last_id);
  }

  void read_quantization() {
    const JsonFields& t = text();
    auto quant = top_.object("quantization_config");
    // V4 keeps expert_dtype at the top level; V4.1 inside quantization_config (v4_arch §1.1, §1.3).
    auto expert_dtype = agree(top_, "expert_dtype", top_.string("expert_dtype"),
                              quant ? *quant : top_, "expert_dtype",
                              quant ? quant->string("expert_dtype") : std::nullopt);
    if (text_) expert_dtype = agree(t, "expert_dtype", t.string("expert_dtype"), top_, "expert_dtype", expert_dtype);
    Quantization& q = config_.quantization;
    if (!quant) {
      if (expert_dtype && *expert_dtype != "bf16")
        top_.fail_field("expert_dtype", str_cat("= \"", *expert_dtype, "\" needs a quantization_config"));
      q = Quantization{};
      return;
    }
    std::string method = quant->string("quant_method").value_or("");
    if (method != "fp8") quant->fail_field("quant_method", str_cat("= \"", method, "\" is unsupported (only fp8)"));
    if (auto fmt = quant->string("fmt"); fmt && *fmt != "e4m3")
      quant->fail_field("fmt", str_cat("= \"", *fmt, "\" is unsupported (only e4m3)"));
    // Default ue8m0: the reference ModelArgs.scale_fmt; DeepSeek ships no other scale format.
    if (auto scale = quant->string("scale_fmt"); scale && *scale != "ue8m0")
      quant->fail_field("scale_fmt", str_cat("= \"", *scale, "\" is unsupported (only ue8m0)"));
    // Required: V4 uses 128x128 and V4.1 32x32, and guessing wrong corrupts every weight.
    auto block = quant->integers("weight_block_size", std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max());
    if (!block) quant->fail_missing("weight_block_size");
    if (block->size() != 2)
      quant->fail_field("weight_block_size", str_cat("has ", block->size(), " entries, expected 2 (rows, cols)"));
    for (size_t i = 0; i < 2; ++i)
      if ((*block)[i] < 1 || (*block)[i] > kMaxBlock)
        quant->fail_field(str_cat("weight_block_size[", i, "]"),
                          str_cat("= ", (*block)[i], " must be a positive block size <= ", kMaxBlock));
    q.dense_format = WeightFormat::FP8;
    q.block_rows = (*block)[0];
    q.block_cols = (*block)[1];
    // Without expert_dtype the experts are FP8 like the rest (model card as relayed in v4_arch §1.1).
    std::string experts = expert_dtype.value_or("fp8");
    if (experts == "fp4") q.expert_format = WeightFormat::FP4;
    else if (experts == "fp8") q.expert_format = WeightFormat::FP8;
    else if (experts == "bf16") q.expert_format = WeightFormat::BF16;
    else
      (quant->has("expert_dtype") ? *quant : top_)
          .fail_field("expert_dtype", str_cat("= \"", experts, "\" is unsupported (fp4, fp8, bf16)"));
  }

  void reject_v41_only_fields() {
    const JsonFields& t = text();
    for (std::string_view key : {"kv_source_layer_ids", "index_source_layer_ids", "engram_layer_ids"}) {
      auto ids = t.integers(key, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
      if (ids && !ids->empty()) t.fail_field(key, "is a V4.1 field but model_type is deepseek_v4");
    }
  }

  // Sorted, unique, inside [0, num_layers).
  std::vector<int64_t> layer_ids(const JsonFields& fields, std::string_view key, bool required) {
    auto ids = fields.integers(key, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    if (!ids) {
      if (required) fields.fail_missing(key);
      return {};
    }
    for (size_t i = 0; i < ids->size(); ++i) {
      int64_t id = (*ids)[i];
      if (id < 0 || id >= config_.num_layers)
        fields.fail_field(str_cat(key, "[", i, "]"),
                          str_cat("= ", id, " is out of range [0, ", config_.num_layers, ")"));
      if (i > 0 && id <= (*ids)[i - 1])
        fields.fail_field(key, str_cat("= ", join(*ids), " must be sorted ascending without repeats"));
    }
    return *ids;
  }

  // V4.1 CSA2 roles (v4_arch §2.10c; transformers DeepseekV41TextConfig.__post_init__ checks).
  void read_sources() {
    const JsonFields& t = text();
    const auto& ratios = config_.compress_ratios;
    config_.kv_source_layer_ids = layer_ids(t, "kv_source_layer_ids", true);
    config_.index_source_layer_ids = layer_ids(t, "index_source_layer_ids", true);
    const auto& kv = config_.kv_source_layer_ids;
    const auto& index = config_.index_source_layer_ids;
    for (int64_t id : kv) {
      if (ratios[id] == 0)
        t.fail_field("kv_source_layer_ids", str_cat("lists layer ", id, " whose compress ratio is 0"));
      // A Full layer computes its own top-k (§2.10c), so it is an index source too.
      if (!contains(index, id))
        t.fail_field("index_source_layer_ids", str_cat("lacks kv source layer ", id,
                                                       " (a kv source computes its own top-k)"));
    }
    for (int64_t id : index)
      if (ratios[id] == 0)
        t.fail_field("index_source_layer_ids", str_cat("lists layer ", id, " whose compress ratio is 0"));
    // Every ratio > 0 layer reads the latest kv source at or before it, whose ratio must match.
    for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
      if (ratios[layer] == 0) continue;
      int64_t source = config_.kv_source_of(layer);
      if (source < 0)
        t.fail_field("kv_source_layer_ids", str_cat("has no source at or before layer ", layer,
                                                    " (compress ratio ", ratios[layer], ")"));
      if (ratios[source] != ratios[layer])
        t.fail_field(str_cat("compress_ratios[", layer, "]"),
                     str_cat("= ", ratios[layer], " differs from its kv source layer ", source, " (ratio ",
                             ratios[source], ")"));
    }
    if (v41_layer_types_) {
      for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
        bool shared = (*v41_layer_types_)[layer] == kSharedCompressed;
        if (shared != contains(kv, layer))
          t.fail_field(str_cat("layer_types[", layer, "]"),
                       str_cat("= \"", (*v41_layer_types_)[layer], "\" contradicts `", t.path("kv_source_layer_ids"),
                               "` = ", join(kv)));
      }
    }
    // Default: transformers uses the last kv source; negative disables the candidate pool.
    auto candidate = t.integer("candidate_source_layer_id", std::numeric_limits<int64_t>::min(), kMaxLayers);
    config_.candidate_source_layer_id = candidate ? std::max<int64_t>(*candidate, -1) : (kv.empty() ? -1 : kv.back());
    if (config_.candidate_source_layer_id >= 0 && !contains(index, config_.candidate_source_layer_id))
      t.fail_field("candidate_source_layer_id", str_cat("= ", config_.candidate_source_layer_id,
                                                        " is not in `", t.path("index_source_layer_ids"), "`"));
    // Defaults 2048 / 8 (transformers).
    config_.candidate_topk_blocks = t.integer("candidate_topk_blocks", 1, kMaxPositions).value_or(2048);
    config_.candidate_block_size = t.integer("candidate_block_size", 1, kMaxPositions).value_or(8);
  }

  void read_engram() {
    const JsonFields& t = text();
    EngramConfig& e = config_.engram;
    e.layer_ids = layer_ids(t, "engram_layer_ids", false);
    // Defaults: transformers DeepseekV41TextConfig (4, 16000000, 8, 256, pad 2, 99092).
    e.max_ngram_size = t.integer("engram_max_ngram_size", 2, 16).value_or(4);
    e.vocab_size = t.integer("engram_vocab_size", 1, kMaxEngramRows).value_or(16000000);
    e.n_heads = t.integer("engram_n_heads", 1, 64).value_or(8);
    e.head_dim = t.integer("engram_head_dim", 1, kMaxHeadDim).value_or(256);
    // DeepSeek's key is engram_pad_token_id (v4_arch §1.3), transformers' engram_pad_id.
    e.pad_token_id = agree(t, "engram_pad_token_id", t.integer("engram_pad_token_id", 0, config_.vocab_size - 1),
                           t, "engram_pad_id", t.integer("engram_pad_id", 0, config_.vocab_size - 1))
                         .value_or(2);
    e.compressed_vocab_size = t.integer("engram_compressed_vocab_size", 1, kMaxVocab).value_or(99092);
    auto rows = t.integers("engram_num_embeddings", 1, kMaxEngramRows);
    if (e.layer_ids.empty()) {
      if (rows && !rows->empty())
        t.fail_field("engram_num_embeddings", "is given but `engram_layer_ids` is empty");
      return;
    }
    if (!rows) t.fail_missing("engram_num_embeddings");
    if (rows->size() != e.layer_ids.size())
      t.fail_field("engram_num_embeddings", str_cat("has ", rows->size(), " entries but `", t.path("engram_layer_ids"),
                                                    "` has ", e.layer_ids.size()));
    e.num_embeddings = *rows;
  }

  // DSpark drafter fields (both families, optional): present when any dspark_* key is.
  void read_dspark() {
    const JsonFields& t = text();
    bool any = false;
    for (std::string_view key : {"dspark_block_size", "dspark_markov_rank", "dspark_noise_token_id",
                                 "dspark_target_layer_ids", "dspark_n_routed_experts", "dspark_num_experts_per_tok"})
      any = any || t.has(key);
    if (!any) return;
    DsparkConfig d;
    d.block_size = t.required_integer("dspark_block_size", 1, 1024);
    d.noise_token_id = t.required_integer("dspark_noise_token_id", 0, config_.vocab_size - 1);
    d.target_layer_ids = layer_ids(t, "dspark_target_layer_ids", true);
    // Defaults: transformers markov rank 256; a V4 DSpark config has no expert fields (§1.1), so
    // its draft layers use the main model's experts.
    d.markov_rank = t.integer("dspark_markov_rank", 1, kMaxWidth).value_or(256);
    d.n_routed_experts = t.integer("dspark_n_routed_experts", 1, kMaxExperts).value_or(config_.n_routed_experts);
    d.num_experts_per_tok =
        t.integer("dspark_num_experts_per_tok", 1, kMaxExperts).value_or(config_.num_experts_per_tok);
    if (d.num_experts_per_tok > d.n_routed_experts)
      t.fail_field("dspark_num_experts_per_tok", str_cat("= ", d.num_experts_per_tok, " exceeds the draft layers' ",
                                                         d.n_routed_experts, " routed experts"));
    d.confidence_temperatures = t.numbers("dspark_confidence_temperatures", 1e-3, 1e3)
                                    .value_or(std::vector<double>(static_cast<std::size_t>(d.block_size), 1.0));
    if (static_cast<int64_t>(d.confidence_temperatures.size()) != d.block_size)
      t.fail_field("dspark_confidence_temperatures", str_cat("has ", d.confidence_temperatures.size(),
                                                             " entries; dspark_block_size is ", d.block_size));
    config_.dspark = d;
  }

  void check_cross_field_rules() {
    const JsonFields& t = text();
    const ModelConfig& c = config_;
    if (c.num_experts_per_tok > c.n_routed_experts)
      t.fail_field("num_experts_per_tok", str_cat("= ", c.num_experts_per_tok, " exceeds `",
                                                  t.path("n_routed_experts"), "` = ", c.n_routed_experts));
    int64_t max_experts = c.n_routed_experts;
    if (c.dspark) max_experts = std::max(max_experts, c.dspark->n_routed_experts);
    if (c.total_layers() * max_experts > kMaxExpertInstances)
      t.fail_field("n_routed_experts", str_cat("x layers = ", c.total_layers() * max_experts, " expert instances, above ",
                                               "the sanity limit ", kMaxExpertInstances));
    if (c.num_heads % c.o_groups != 0)
      t.fail_field("o_groups", str_cat("= ", c.o_groups, " does not divide `", t.path("num_attention_heads"),
                                       "` = ", c.num_heads, " (heads are split evenly into output groups)"));
    // The indexer ropes the last rope_head_dim dims of its heads too (v4_arch §2.4.2).
    if (c.index_head_dim < c.rope_head_dim)
      t.fail_field("index_head_dim", str_cat("= ", c.index_head_dim, " is smaller than `", t.path("qk_rope_head_dim"),
                                             "` = ", c.rope_head_dim));
    if (c.quantization.expert_format == WeightFormat::FP4) {
      // FP4 experts pack two values per byte with one scale per 32 inputs ([out, in/2], [out, in/32]).
      if (c.hidden_size % 32 != 0)
        t.fail_field("hidden_size", str_cat("= ", c.hidden_size, " is not divisible by 32, which FP4 experts need"));
      if (c.moe_intermediate_size % 32 != 0)
        t.fail_field("moe_intermediate_size",
                     str_cat("= ", c.moe_intermediate_size, " is not divisible by 32, which FP4 experts need"));
    }
  }

  JsonFields top_;
  std::optional<JsonFields> text_;
  std::optional<std::vector<std::string>> v41_layer_types_;
  ModelConfig config_;
};

}  // namespace

ModelConfig parse_model_config(const nlohmann::json& document, std::string_view origin) {
  try {
    return Parser(document, origin).parse();
  } catch (const nlohmann::json::exception& e) {
    // Every read goes through JsonFields' type checks; this is a last line so that a missed
    // case still reaches the user as a config error rather than a crash.
    fail(origin, ": malformed config: ", e.what());
  }
}

}  // namespace deepinfer

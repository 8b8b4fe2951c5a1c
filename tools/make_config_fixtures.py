#!/usr/bin/env python3
"""Writes tests/data/configs/*.json: DeepSeek-layout configs of V4-Flash (shared/docs/v4_arch.md §1.1)
and V4.1-Flash (§1.3), tiny configs of both families, and the transformers save_pretrained layout of
the V4 ones. transformers is not installable here, so the save_pretrained layout is produced by
hf_v4() below, which follows DeepseekV4Config.__post_init__ in huggingface/transformers
src/transformers/models/deepseek_v4/configuration_deepseek_v4.py @ b5b741e52e24 (read via the search
tools; 015c07816415 has the same logic)."""
import json
import pathlib
import sys

out_dir = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/configs")


def write(name, document):
    with open(out_dir / name, "w") as f:
        json.dump(document, f, indent=2)


def hf_v4(src):
    """compress_ratios -> layer_types (truncated to num_hidden_layers), num_hash_layers ->
    mlp_layer_types, qk_rope_head_dim -> partial_rotary_factor, rope_scaling -> rope_parameters
    {main, compress}; topk_method is no field of the class."""
    n = src["num_hidden_layers"]
    names = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}
    dropped = ("compress_ratios", "num_hash_layers", "qk_rope_head_dim", "rope_scaling", "topk_method")
    out = {k: v for k, v in src.items() if k not in dropped}
    prf = src["qk_rope_head_dim"] / src["head_dim"]
    out["layer_types"] = [names[r] for r in src["compress_ratios"][:n]]
    out["compress_rates"] = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    out["mlp_layer_types"] = ["hash_moe"] * src["num_hash_layers"] + ["moe"] * (n - src["num_hash_layers"])
    out["partial_rotary_factor"] = prf
    yarn = dict(src["rope_scaling"])
    yarn["rope_type"] = yarn.pop("type")
    for k in ("beta_fast", "beta_slow", "factor"):
        yarn[k] = float(yarn[k])
    out["rope_parameters"] = {
        "main": {"rope_type": "default", "rope_theta": float(src["rope_theta"]), "partial_rotary_factor": prf},
        "compress": {**yarn, "rope_theta": float(src["compress_rope_theta"]), "partial_rotary_factor": prf,
                     "attention_factor": 1.0},
    }
    out["rope_theta"] = float(src["rope_theta"])
    out["compress_rope_theta"] = float(src["compress_rope_theta"])
    out["output_router_logits"] = False
    out["router_aux_loss_coef"] = 0.001
    out["router_jitter_noise"] = 0.0
    out["mlp_bias"] = False
    out["pad_token_id"] = None
    out["dtype"] = out.pop("torch_dtype", "bfloat16")
    out["transformers_version"] = "5.0.0.dev0"
    return dict(sorted(out.items()))


YARN = {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1}

v4_ratios = [0, 0] + [4 if i % 2 == 0 else 128 for i in range(2, 43)] + [0]
v4 = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 1,
    "compress_ratios": v4_ratios, "compress_rope_theta": 160000, "expert_dtype": "fp4",
    "hc_eps": 1e-06, "hc_mult": 4, "hc_sinkhorn_iters": 20,
    "head_dim": 512, "hidden_act": "silu", "hidden_size": 4096,
    "index_head_dim": 128, "index_n_heads": 64, "index_topk": 512,
    "initializer_range": 0.02, "max_position_embeddings": 1048576,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "norm_topk_prob": True, "num_attention_heads": 64, "num_experts_per_tok": 6,
    "num_hash_layers": 3, "num_hidden_layers": 43, "num_key_value_heads": 1,
    "num_nextn_predict_layers": 1, "o_groups": 8, "o_lora_rank": 1024,
    "q_lora_rank": 1024, "qk_rope_head_dim": 64,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 16, "original_max_position_embeddings": 65536,
                     "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 1.5, "scoring_func": "sqrtsoftplus",
    "sliding_window": 128, "swiglu_limit": 10.0, "tie_word_embeddings": False,
    "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "transformers_version": "4.57.1",
    "use_cache": True, "vocab_size": 129280,
}

v41 = {
    "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "image_token_id": 129264,
    "quantization_config": {"activation_scheme": "dynamic", "expert_dtype": "fp4", "quant_method": "fp8",
                            "scale_fmt": "ue8m0", "weight_block_size": [32, 32]},
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "deepseek_v41_text",
        "vocab_size": 129280, "hidden_size": 5120, "num_hidden_layers": 40,
        "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64,
        "q_lora_rank": 1280, "o_lora_rank": 1024, "o_groups": 8, "sliding_window": 128,
        "rope_theta": 10000, "compress_rope_theta": 160000, "rope_scaling": dict(YARN),
        "max_position_embeddings": 1048576, "rms_norm_eps": 1e-20,
        "n_routed_experts": 384, "num_experts_per_tok": 6, "n_shared_experts": 1, "moe_intermediate_size": 2304,
        "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": True,
        "routed_scaling_factor": 1.5, "swiglu_limit": 10.0,
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06,
        "index_n_heads": 32, "index_head_dim": 128, "index_topk": 512,
        "compress_ratios": [0, 0] + [2] * 18 + [1] * 20 + [0, 0, 0],
        "kv_source_layer_ids": [2, 8, 14, 20],
        "index_source_layer_ids": [2, 8, 14, 20, 24, 28, 32, 36],
        "candidate_source_layer_id": 20, "candidate_topk_blocks": 2048, "candidate_block_size": 8,
        "engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 384016682],
        "engram_max_ngram_size": 4, "engram_vocab_size": 16000000, "engram_n_heads": 8, "engram_head_dim": 256,
        "engram_pad_token_id": 2, "engram_compressed_vocab_size": 99092,
        "num_nextn_predict_layers": 3,
        "dspark_block_size": 5, "dspark_noise_token_id": 128799, "dspark_target_layer_ids": [37, 38, 39],
        "dspark_markov_rank": 256, "dspark_n_routed_experts": 128, "dspark_num_experts_per_tok": 3,
        "hidden_act": "silu", "tie_word_embeddings": False, "eos_token_id": 1, "bos_token_id": 0,
    },
    "vision_config": {"num_hidden_layers": 32, "hidden_size": 1024, "num_attention_heads": 16,
                      "intermediate_size": 2816, "patch_size": 14, "rope_theta": 10000, "downsample_ratio": 3,
                      "max_image_tokens": 1024, "min_pixels": 295936, "max_wh_ratio": None},
}

tiny_v4 = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4, "num_nextn_predict_layers": 1,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 16,
    "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 32, "sliding_window": 8,
    "compress_ratios": [0, 4, 128, 4, 0],
    "rope_theta": 10000, "compress_rope_theta": 160000, "rope_scaling": dict(YARN),
    "max_position_embeddings": 4096,
    "index_n_heads": 4, "index_head_dim": 32, "index_topk": 4,
    "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "rms_norm_eps": 1e-06,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
    "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": True, "routed_scaling_factor": 1.5,
    "num_hash_layers": 1, "swiglu_limit": 10.0, "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": False,
}

tiny_v41 = {
    "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41",
    "text_config": {
        "model_type": "deepseek_v41_text",
        "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4, "num_nextn_predict_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 16,
        "q_lora_rank": 32, "o_groups": 2, "o_lora_rank": 32, "sliding_window": 8,
        "compress_ratios": [0, 2, 1, 1, 0],
        "kv_source_layer_ids": [1, 2], "index_source_layer_ids": [1, 2, 3],
        "candidate_source_layer_id": 2, "candidate_topk_blocks": 2, "candidate_block_size": 2,
        "rope_theta": 10000, "compress_rope_theta": 160000, "rope_scaling": dict(YARN),
        "max_position_embeddings": 4096,
        "index_n_heads": 2, "index_head_dim": 32, "index_topk": 4,
        "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "rms_norm_eps": 1e-20,
        "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
        "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": True,
        "routed_scaling_factor": 1.5, "swiglu_limit": 10.0,
        "engram_layer_ids": [1], "engram_num_embeddings": [1000], "engram_max_ngram_size": 3,
        "engram_vocab_size": 97, "engram_n_heads": 2, "engram_head_dim": 16, "engram_pad_id": 2,
        "engram_compressed_vocab_size": 400,
        "eos_token_id": 1, "tie_word_embeddings": False,
    },
}

write("v4_flash.json", v4)
write("v4_flash_transformers.json", hf_v4(v4))
write("v41_flash.json", v41)
write("tiny_v4.json", tiny_v4)
write("tiny_v4_transformers.json", hf_v4(tiny_v4))
write("tiny_v41.json", tiny_v41)

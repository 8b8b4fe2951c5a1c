#pragma once
// "The V4 benchmark model": tiny_v4.json scaled up to hidden 512, 4 layers (compress ratios
// 0/4/16/4), 8 heads of 128, q rank 256, 16 experts top-4 of width 256, vocab 4096, random BF16
// weights (random_checkpoint.h). Large enough that a forward pass measures kernels rather than
// per-call overhead, small enough to write in a second. One definition, shared by the
// forward-pass and the serving-engine benchmarks (docs/BENCHMARKS.md), so their figures describe
// the same model. Needs DEEPINFER_TEST_DATA_DIR (tests/data) for the base config.
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "support/random_checkpoint.h"

namespace deepinfer::test_support {

// Writes config.json and model.safetensors into `dir` (an existing folder).
inline void write_v4_benchmark_model(const std::string& dir) {
  const std::string base = std::string(DEEPINFER_TEST_DATA_DIR) + "/configs/tiny_v4.json";
  std::ifstream in(base);
  if (!in) fail(base, ": cannot open the benchmark model's base config");
  nlohmann::json config = nlohmann::json::parse(in);
  config["vocab_size"] = 4096;
  config["hidden_size"] = 512;
  config["num_hidden_layers"] = 4;
  config["num_nextn_predict_layers"] = 0;
  config["num_attention_heads"] = 8;
  config["head_dim"] = 128;
  config["qk_rope_head_dim"] = 64;
  config["q_lora_rank"] = 256;
  config["o_groups"] = 2;
  config["o_lora_rank"] = 128;
  config["sliding_window"] = 64;
  config["compress_ratios"] = {0, 4, 16, 4};
  config["index_n_heads"] = 8;
  config["index_head_dim"] = 64;
  config["index_topk"] = 8;
  config["n_routed_experts"] = 16;
  config["num_experts_per_tok"] = 4;
  config["moe_intermediate_size"] = 256;
  std::ofstream(dir + "/config.json") << config.dump(2);
  write_random_checkpoint(dir);
}

}  // namespace deepinfer::test_support

// Engram's hash multipliers against numpy (tests/data/engram/hash_multipliers.json, written by
// tools/engram/make_hash_multipliers.py with numpy 1.24.2), and the prime bucket layout.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/engram_hash.h"
#include "model/numpy_random.h"

namespace deepinfer::model {
namespace {

TEST(EngramMultipliers, MatchNumpy) {
  std::ifstream in(DEEPINFER_TEST_DATA_DIR "/engram/hash_multipliers.json");
  ASSERT_TRUE(in) << "missing fixture";
  const nlohmann::json doc = nlohmann::json::parse(in);
  ASSERT_GE(doc.at("cases").size(), 10u);
  for (const nlohmann::json& c : doc.at("cases")) {
    const int64_t layer = c.at("layer_id"), n = c.at("max_ngram_size"), vocab = c.at("compressed_vocab_size");
    const std::vector<int64_t> layer_ids{layer};
    EXPECT_EQ(engram_hash_multipliers(layer_ids, n, vocab), c.at("multipliers").get<std::vector<int64_t>>())
        << "layer " << layer << ", n " << n << ", vocab " << vocab;
  }
}

TEST(EngramMultipliers, ReleasedConfigRowsStackInLayerOrder) {
  const std::vector<int64_t> layer_ids{1, 14};
  const std::vector<int64_t> both = engram_hash_multipliers(layer_ids, 4, 99092);
  const std::vector<int64_t> expected{76632096046245, 4839876093313,  35959672319349, 73987337458391,
                                      67716810739261, 51510806800915, 30921347202721, 82619226485591};
  EXPECT_EQ(both, expected);
}

TEST(EngramLayout, PrimesAreDrawnInOrderAndNeverReused) {
  EngramConfig config;
  config.layer_ids = {3, 7};
  config.max_ngram_size = 3;
  config.vocab_size = 10;
  config.n_heads = 2;
  const EngramLayout layout = EngramLayout::from_config(config);
  // Each n-gram size restarts the search at vocab_size - 1 = 9, skipping primes already taken.
  EXPECT_EQ(layout.primes, (std::vector<int64_t>{11, 13, 17, 19, 23, 29, 31, 37}));
  EXPECT_EQ(layout.offsets, (std::vector<int64_t>{0, 11, 24, 41, 0, 23, 52, 83}));
  EXPECT_EQ(layout.cols(), 4);
  EXPECT_EQ(layout.rows_used(0), 60);
  EXPECT_EQ(layout.rows_used(1), 120);
}

}  // namespace
}  // namespace deepinfer::model

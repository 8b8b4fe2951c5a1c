// The forward pass gives the same bits whatever the pool size: every loop the model spreads over
// threads (attention heads, indexer scores and top-k, expert dispatch, norms, mHC mixes) computes
// each output on its own. With the parallel threshold at 0 even the tiny fixtures split every loop.
#include <gtest/gtest.h>

#include <cstring>

#include "core/thread_pool.h"
#include "golden.h"
#include "model/model.h"
#include "model/parallel.h"

namespace deepinfer::model {
namespace {

// All logits of a prefill of `prefill` tokens, then one decode step per remaining token.
std::vector<float> prefill_then_decode(const Model& model, const std::vector<int32_t>& ids, std::size_t prefill) {
  SequenceState sequence = model.new_sequence();
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  std::vector<float> logits(ids.size() * vocab);
  model.forward(sequence, std::span(ids).first(prefill), std::span(logits).first(prefill * vocab));
  for (std::size_t t = prefill; t < ids.size(); ++t)
    model.forward(sequence, std::span(ids).subspan(t, 1), std::span(logits).subspan(t * vocab, vocab));
  return logits;
}

void expect_same_bits_for_every_pool_size(const Model& model, const std::vector<int32_t>& ids) {
  const std::size_t prefill = ids.size() - 6;
  std::vector<float> serial;
  {
    ThreadPool one(1);
    ScopedDefaultThreadPool use(one);
    serial = prefill_then_decode(model, ids, prefill);
  }
  ScopedMinParallelWork split_everything(0);
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    ScopedDefaultThreadPool use(pool);
    const std::vector<float> threaded = prefill_then_decode(model, ids, prefill);
    ASSERT_EQ(threaded.size(), serial.size());
    EXPECT_EQ(std::memcmp(threaded.data(), serial.data(), serial.size() * sizeof(float)), 0) << threads << " threads";
  }
}

TEST(ThreadInvarianceTest, V4FixtureGivesTheSameBitsOnOneTwoAndThreeThreads) {
  const Model model = Model::load(testing::fixture_dir("tiny_fp8"));
  expect_same_bits_for_every_pool_size(model, testing::Golden("tiny_fp8").ids("input_ids"));
}

TEST(ThreadInvarianceTest, V41FixtureGivesTheSameBitsOnOneTwoAndThreeThreads) {
  const Model model = Model::load(testing::fixture_dir("tiny_fp8", "v41"),
                                  LoadOptions{.tokenizer = std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json"});
  expect_same_bits_for_every_pool_size(model, testing::Golden("tiny_fp8", "v41").ids("input_ids"));
}

}  // namespace
}  // namespace deepinfer::model

// The forward pass gives the same bits whatever the pool size: every loop the model spreads over
// threads (attention heads, indexer scores and top-k, expert dispatch, norms, mHC mixes) computes
// each output on its own. With the parallel threshold at 0 even the tiny models split every loop.
#include <gtest/gtest.h>

#include <cstring>

#include "core/thread_pool.h"
#include "golden.h"
#include "model/model.h"
#include "model/parallel.h"
#include "v41_synthetic.h"

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

// V4.1 CSA2 (shared entries, candidate blocks, reindex) on a synthetic tiny_v41 without Engram:
// the fixture's Engram tokenizer map would take most of the test's time under sanitizers.
TEST(ThreadInvarianceTest, V41SyntheticGivesTheSameBitsOnOneTwoAndThreeThreads) {
  test_support::ScratchDir dir;
  test_support::write_synthetic(dir.str(), [](nlohmann::json& document) { test_support::drop_engram(document["text_config"]); });
  const Model model = Model::load(dir.str());
  ASSERT_EQ(model.config().family, ModelFamily::V41);
  expect_same_bits_for_every_pool_size(model, test_support::prompt(45, model.vocab_size()));
}

}  // namespace
}  // namespace deepinfer::model

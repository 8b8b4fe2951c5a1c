// forward_batch: a sequence's logits are bit-identical whether it runs alone or in a batch with
// any other sequences, with any chunking of its tokens (the property the engine's continuous
// batching relies on), and a malformed batch is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "golden.h"
#include "model/model.h"
#include "model/parallel.h"
#include "v41_synthetic.h"

namespace deepinfer::model {
namespace {

using Tokens = std::vector<int32_t>;

Tokens random_tokens(std::mt19937& rng, int64_t length, int64_t vocab) {
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  Tokens out;
  for (int64_t i = 0; i < length; ++i) out.push_back(id(rng));
  return out;
}

// Every position's logits of `tokens` fed in one call.
std::vector<float> solo_logits(const Model& model, const Tokens& tokens) {
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits(tokens.size() * static_cast<std::size_t>(model.vocab_size()));
  model.forward(sequence, tokens, logits);
  return logits;
}

// Runs every sequence to its end through forward_batch calls that each take a random subset of
// the unfinished sequences and a random chunk of each; every position's logits.
std::vector<std::vector<float>> mixed_logits(const Model& model, const std::vector<Tokens>& all, std::mt19937& rng) {
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  std::vector<SequenceState> sequences;
  std::vector<std::vector<float>> logits;
  for (const Tokens& tokens : all) {
    sequences.push_back(model.new_sequence());
    logits.emplace_back(tokens.size() * vocab);
  }
  std::vector<std::size_t> done(all.size(), 0);
  std::bernoulli_distribution join(0.6);
  for (bool unfinished = true; unfinished;) {
    std::vector<BatchItem> items;
    for (std::size_t s = 0; s < all.size(); ++s) {
      if (done[s] == all[s].size() || !join(rng)) continue;
      const std::size_t left = all[s].size() - done[s];
      // Mostly decode-sized steps, sometimes a long chunk.
      const std::size_t chunk = std::bernoulli_distribution(0.3)(rng)
                                    ? std::uniform_int_distribution<std::size_t>(1, left)(rng)
                                    : 1;
      items.push_back(BatchItem{&sequences[s], std::span(all[s]).subspan(done[s], chunk),
                                std::span(logits[s]).subspan(done[s] * vocab, chunk * vocab), LogitRows::All});
      done[s] += chunk;
    }
    model.forward_batch(items);
    unfinished = false;
    for (std::size_t s = 0; s < all.size(); ++s) unfinished |= done[s] < all[s].size();
  }
  return logits;
}

void expect_batch_invariant(const Model& model, int mixes, uint32_t seed) {
  ScopedMinParallelWork split_everything(0);
  std::mt19937 rng(seed);
  std::vector<Tokens> all;
  std::vector<std::vector<float>> solo;
  for (int s = 0; s < 5; ++s) {
    all.push_back(random_tokens(rng, std::uniform_int_distribution<int64_t>(1, 40)(rng), model.vocab_size()));
    solo.push_back(solo_logits(model, all.back()));
  }
  for (int mix = 0; mix < mixes; ++mix) {
    const std::vector<std::vector<float>> mixed = mixed_logits(model, all, rng);
    for (std::size_t s = 0; s < all.size(); ++s)
      ASSERT_EQ(std::memcmp(mixed[s].data(), solo[s].data(), solo[s].size() * sizeof(float)), 0)
          << "mix " << mix << ", sequence " << s << " of " << all[s].size() << " tokens";
  }
}

TEST(BatchInvarianceTest, V4LogitsEqualSoloRunsInEveryMix) {
  expect_batch_invariant(Model::load(testing::fixture_dir("tiny_fp8")), 6, 1);
}

// V4.1 with Engram: the n-gram look-back is per sequence too.
TEST(BatchInvarianceTest, V41WithEngramLogitsEqualSoloRunsInEveryMix) {
  const Model model = Model::load(testing::fixture_dir("tiny_fp8", "v41"),
                                  LoadOptions{.tokenizer = std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json"});
  ASSERT_NE(model.engram(), nullptr);
  expect_batch_invariant(model, 4, 2);
}

TEST(BatchInvarianceTest, V41SyntheticLogitsEqualSoloRunsInEveryMix) {
  test_support::ScratchDir dir;
  test_support::write_synthetic(dir.str(), [](nlohmann::json& document) { test_support::drop_engram(document["text_config"]); });
  expect_batch_invariant(Model::load(dir.str()), 4, 3);
}

TEST(BatchInvarianceTest, LastAndNoneRowsMatchTheirSoloRows) {
  const Model model = Model::load(testing::fixture_dir("tiny_fp8"));
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  std::mt19937 rng(4);
  const Tokens a = random_tokens(rng, 9, model.vocab_size());
  const Tokens b = random_tokens(rng, 4, model.vocab_size());
  const Tokens c = random_tokens(rng, 6, model.vocab_size());
  const std::vector<float> solo_a = solo_logits(model, a);
  SequenceState sa = model.new_sequence(), sb = model.new_sequence(), sc = model.new_sequence();
  std::vector<float> last_a(vocab), none;
  std::vector<float> all_b(b.size() * vocab);
  model.forward_batch(std::vector<BatchItem>{{&sa, a, last_a, LogitRows::Last},
                                             {&sb, b, all_b, LogitRows::All},
                                             {&sc, c, none, LogitRows::None}});
  EXPECT_EQ(std::memcmp(last_a.data(), solo_a.data() + (a.size() - 1) * vocab, vocab * sizeof(float)), 0);
  const std::vector<float> solo_b = solo_logits(model, b);
  EXPECT_EQ(std::memcmp(all_b.data(), solo_b.data(), solo_b.size() * sizeof(float)), 0);
  EXPECT_EQ(sc.length, static_cast<int64_t>(c.size()));
}

TEST(BatchInvarianceTest, RefusesAMalformedBatch) {
  const Model model = Model::load(testing::fixture_dir("tiny_fp8"));
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  SequenceState sequence = model.new_sequence();
  const Tokens tokens{1, 2};
  std::vector<float> first(vocab), second(vocab), wrong(3);
  EXPECT_THROW(model.forward_batch(std::vector<BatchItem>{{&sequence, tokens, first, LogitRows::Last},
                                                          {&sequence, tokens, second, LogitRows::Last}}),
               Error);
  EXPECT_THROW(model.forward_batch(std::vector<BatchItem>{{&sequence, tokens, wrong, LogitRows::Last}}), Error);
  EXPECT_THROW(model.forward_batch(std::vector<BatchItem>{{nullptr, tokens, first, LogitRows::Last}}), Error);
  EXPECT_EQ(sequence.length, 0);
  model.forward_batch({});  // nothing to do
}

}  // namespace
}  // namespace deepinfer::model

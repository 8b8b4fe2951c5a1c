// Engram n-gram hashing on hand-checkable cases: the sequence start and unknown tokens are DEAD,
// blocked look-back hashes the pad's compressed id, and chunked hashing equals one-shot.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include "core/error.h"
#include "model/engram_hash.h"

namespace deepinfer::model {
namespace {

// Two layers, 2- and 3-grams, one head: layer 0 buckets 11 (2-gram) and 13 (3-gram) at offsets 0
// and 11; layer 1 buckets 17 and 19 at 0 and 17. Tokens 0..5 compress to 0,1,1,2,3,4 (pad = 2).
EngramConfig tiny_config() {
  EngramConfig config;
  config.layer_ids = {1, 4};
  config.num_embeddings = {24, 36};
  config.max_ngram_size = 3;
  config.vocab_size = 10;
  config.n_heads = 1;
  config.head_dim = 4;
  config.pad_token_id = 2;
  config.compressed_vocab_size = 5;
  return config;
}

EngramHasher tiny_hasher() { return EngramHasher(tiny_config(), CompressedTokenMap{{0, 1, 1, 2, 3, 4}, 5}); }

// The reference formula for one position: ids = [current, previous, before that] (compressed).
std::vector<int64_t> expected_at(const EngramHasher& hasher, std::array<int64_t, 3> ids) {
  const std::vector<int64_t> primes{11, 13, 17, 19}, offsets{0, 11, 0, 17};
  std::vector<int64_t> out;
  for (int layer = 0; layer < 2; ++layer) {
    const int64_t* m = &hasher.multipliers()[static_cast<std::size_t>(layer * 3)];
    const int64_t two = (ids[0] * m[0]) ^ (ids[1] * m[1]);
    const int64_t three = two ^ (ids[2] * m[2]);
    out.push_back(two % primes[layer * 2] + offsets[layer * 2]);
    out.push_back(three % primes[layer * 2 + 1] + offsets[layer * 2 + 1]);
  }
  return out;
}

std::vector<int64_t> row(const std::vector<int64_t>& ids, std::size_t t) {
  return {ids.begin() + static_cast<std::ptrdiff_t>(t * 4), ids.begin() + static_cast<std::ptrdiff_t>(t * 4 + 4)};
}

TEST(EngramHash, StartOfSequenceHashesThePad) {
  const EngramHasher hasher = tiny_hasher();
  EXPECT_EQ(hasher.pad_compressed_id(), 1);
  EngramHashState state = hasher.new_state();
  const std::vector<int32_t> tokens{4, 5, 3};  // compressed 3, 4, 2
  const std::vector<int64_t> ids = hasher.hash(state, tokens);
  ASSERT_EQ(ids.size(), 3u * 2 * 2);
  EXPECT_EQ(row(ids, 0), expected_at(hasher, {3, 1, 1}));  // both look-backs DEAD -> pad
  EXPECT_EQ(row(ids, 1), expected_at(hasher, {4, 3, 1}));
  EXPECT_EQ(row(ids, 2), expected_at(hasher, {2, 4, 3}));
  // The bucket ranges are disjoint and inside each layer's rows.
  for (std::size_t t = 0; t < 3; ++t) {
    EXPECT_LT(ids[t * 4 + 0], 11);
    EXPECT_GE(ids[t * 4 + 1], 11);
    EXPECT_LT(ids[t * 4 + 1], 24);
    EXPECT_LT(ids[t * 4 + 2], 17);
    EXPECT_GE(ids[t * 4 + 3], 17);
    EXPECT_LT(ids[t * 4 + 3], 36);
  }
}

TEST(EngramHash, ChunkedEqualsOneShot) {
  const EngramHasher hasher = tiny_hasher();
  const std::vector<int32_t> tokens{0, 4, 5, 1, 3, 2, 4, 4, 5, 0, 1};
  EngramHashState whole_state = hasher.new_state();
  const std::vector<int64_t> whole = hasher.hash(whole_state, tokens);
  for (std::size_t chunk : {1u, 2u, 3u, 5u}) {
    EngramHashState state = hasher.new_state();
    std::vector<int64_t> chunked;
    for (std::size_t at = 0; at < tokens.size(); at += chunk) {
      const std::size_t n = std::min(chunk, tokens.size() - at);
      const std::vector<int64_t> part = hasher.hash(state, std::span(tokens).subspan(at, n));
      chunked.insert(chunked.end(), part.begin(), part.end());
    }
    EXPECT_EQ(chunked, whole) << "chunk " << chunk;
    EXPECT_EQ(std::vector<int64_t>(state.lookback().begin(), state.lookback().end()),
              (std::vector<int64_t>{0, 1}));  // compressed ids of the last two tokens (0, 1)
  }
  // A one-token chunk still reads two tokens back.
  EngramHashState state = hasher.new_state();
  (void)hasher.hash(state, std::vector<int32_t>{4});
  (void)hasher.hash(state, std::vector<int32_t>{5});
  const std::vector<int64_t> third = hasher.hash(state, std::vector<int32_t>{0});
  EXPECT_EQ(third, expected_at(hasher, {0, 4, 3}));
}

TEST(EngramHash, UnknownTokenBlocksTheLookBackBehindIt) {
  const EngramHasher hasher = tiny_hasher();
  EngramHashState state = hasher.new_state();
  // Token 9 is beyond the tokenizer's 6 ids: DEAD, like a pad position.
  const std::vector<int32_t> tokens{4, 5, 9, 3, 0};  // compressed 3, 4, DEAD, 2, 0
  const std::vector<int64_t> ids = hasher.hash(state, tokens);
  EXPECT_EQ(row(ids, 2), expected_at(hasher, {1, 1, 1}));  // DEAD itself: everything is the pad
  EXPECT_EQ(row(ids, 3), expected_at(hasher, {2, 1, 1}));  // blocked at shift 1, so shift 2 too
  EXPECT_EQ(row(ids, 4), expected_at(hasher, {0, 2, 1}));
  EXPECT_EQ(std::vector<int64_t>(state.lookback().begin(), state.lookback().end()), (std::vector<int64_t>{2, 0}));
}

TEST(EngramHash, RefusesAMismatchedTokenizer) {
  EXPECT_THROW(EngramHasher(tiny_config(), CompressedTokenMap{{0, 1, 1, 2}, 3}), Error);
  EngramConfig bad_pad = tiny_config();
  bad_pad.pad_token_id = 6;
  EXPECT_THROW(EngramHasher(bad_pad, CompressedTokenMap{{0, 1, 1, 2, 3, 4}, 5}), Error);
}

}  // namespace
}  // namespace deepinfer::model

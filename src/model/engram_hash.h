#pragma once
// Engram's n-gram hashing (transformers deepseek_v41 EngramLayout, compute_hash_multipliers and
// DeepseekV41NgramHashState): every position hashes the 2..N-grams of compressed ids ending at
// it, one bucket per (n-gram size, head) in each engram layer's table.
#include <cstdint>
#include <span>
#include <vector>

#include "io/model_config.h"
#include "model/engram_token_map.h"

namespace deepinfer::model {

// The look-back sentinel: sequence start, or a token with no compressed id. An n-gram never
// spans it; the blocked look-back slots hash the pad token's compressed id instead.
inline constexpr int64_t kEngramDead = -1;

struct EngramLayout {
  int64_t layers = 0;
  int64_t max_ngram_size = 0;
  int64_t heads = 0;
  // [layers][max_ngram_size - 1][heads]: distinct primes drawn in order above vocab_size - 1,
  // each layer restarting the search there but never reusing a prime.
  std::vector<int64_t> primes;
  // [layers][cols]: the start of each (n-gram, head) bucket range inside its layer's table.
  std::vector<int64_t> offsets;

  static EngramLayout from_config(const EngramConfig& config);
  int64_t cols() const { return (max_ngram_size - 1) * heads; }
  // Rows a layer's buckets span: the sum of its primes.
  int64_t rows_used(int64_t layer) const;
};

// [layers][max_ngram_size] odd multipliers: numpy default_rng(10007 * layer_id).integers(0, bound,
// max_ngram_size) * 2 + 1, bound = max(1, (INT64_MAX / compressed_vocab_size) / 2), so that
// id * multiplier never overflows int64.
std::vector<int64_t> engram_hash_multipliers(std::span<const int64_t> layer_ids, int64_t max_ngram_size,
                                             int64_t compressed_vocab_size);

// Per-sequence look-back: the last max_ngram_size - 1 compressed ids (oldest first), DEAD at the
// start, so hashing a sequence in chunks gives exactly the ids of hashing it at once.
class EngramHashState {
 public:
  std::span<const int64_t> lookback() const { return lookback_; }

 private:
  friend class EngramHasher;
  std::vector<int64_t> lookback_;
};

class EngramHasher {
 public:
  // Throws deepinfer::Error when the token map's size differs from the config's
  // engram_compressed_vocab_size (the multipliers would rehash the whole table) or the pad token
  // has no compressed id.
  EngramHasher(const EngramConfig& config, CompressedTokenMap token_map);

  EngramHashState new_state() const;
  // A state holding `lookback` (a saved EngramHashState::lookback()); throws deepinfer::Error
  // when its length or an id does not fit this model.
  EngramHashState state_from(std::span<const int64_t> lookback) const;
  // Hash ids [tokens.size(), layers, cols] (row indices into each layer's own table). A token id
  // outside the tokenizer's range (the model's vocab_size may exceed it) is DEAD, like a pad.
  std::vector<int64_t> hash(EngramHashState& state, std::span<const int32_t> tokens) const;

  const EngramLayout& layout() const { return layout_; }
  std::span<const int64_t> multipliers() const { return multipliers_; }
  const CompressedTokenMap& token_map() const { return token_map_; }
  int64_t pad_compressed_id() const { return pad_id_; }

 private:
  EngramLayout layout_;
  std::vector<int64_t> multipliers_;
  CompressedTokenMap token_map_;
  int64_t pad_id_ = 0;
};

}  // namespace deepinfer::model

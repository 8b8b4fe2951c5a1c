#include "model/engram_hash.h"

#include <limits>
#include <set>

#include "core/error.h"
#include "model/numpy_random.h"

namespace deepinfer::model {
namespace {

bool is_prime(int64_t n) {
  if (n < 2) return false;
  if (n % 2 == 0) return n == 2;
  for (int64_t d = 3; d <= n / d; d += 2)
    if (n % d == 0) return false;
  return true;
}

int64_t next_unused_prime(int64_t after, const std::set<int64_t>& used) {
  int64_t candidate = after + 1;
  while (!is_prime(candidate) || used.contains(candidate)) ++candidate;
  return candidate;
}

// Python's % (the result takes the divisor's sign), which torch's int64 % follows.
int64_t floor_mod(int64_t value, int64_t divisor) {
  const int64_t r = value % divisor;
  return (r != 0 && ((r < 0) != (divisor < 0))) ? r + divisor : r;
}

}  // namespace

EngramLayout EngramLayout::from_config(const EngramConfig& config) {
  EngramLayout layout;
  layout.layers = static_cast<int64_t>(config.layer_ids.size());
  layout.max_ngram_size = config.max_ngram_size;
  layout.heads = config.n_heads;
  std::set<int64_t> used;
  for (int64_t layer = 0; layer < layout.layers; ++layer) {
    int64_t total = 0;
    for (int64_t ngram = 0; ngram + 1 < config.max_ngram_size; ++ngram) {
      int64_t current = config.vocab_size - 1;
      for (int64_t head = 0; head < config.n_heads; ++head) {
        current = next_unused_prime(current, used);
        used.insert(current);
        layout.primes.push_back(current);
        layout.offsets.push_back(total);
        total += current;
      }
    }
  }
  return layout;
}

int64_t EngramLayout::rows_used(int64_t layer) const {
  int64_t total = 0;
  for (int64_t c = 0; c < cols(); ++c) total += primes[static_cast<std::size_t>(layer * cols() + c)];
  return total;
}

std::vector<int64_t> engram_hash_multipliers(std::span<const int64_t> layer_ids, int64_t max_ngram_size,
                                             int64_t compressed_vocab_size) {
  if (compressed_vocab_size < 1) fail("Engram: compressed vocab size must be positive, got ", compressed_vocab_size);
  const int64_t bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab_size) / 2);
  std::vector<int64_t> out;
  for (int64_t layer_id : layer_ids) {
    if (layer_id < 0) fail("Engram: negative layer id ", layer_id);
    const uint64_t seed = static_cast<uint64_t>(layer_id) * 10007u;
    for (int64_t value : numpy_default_rng_integers(seed, bound, max_ngram_size)) out.push_back(value * 2 + 1);
  }
  return out;
}

EngramHasher::EngramHasher(const EngramConfig& config, CompressedTokenMap token_map)
    : layout_(EngramLayout::from_config(config)),
      multipliers_(engram_hash_multipliers(config.layer_ids, config.max_ngram_size, config.compressed_vocab_size)),
      token_map_(std::move(token_map)) {
  if (token_map_.compressed_vocab_size != config.compressed_vocab_size)
    fail("Engram: the tokenizer's compressed vocabulary has ", token_map_.compressed_vocab_size,
         " entries but the config's `engram_compressed_vocab_size` is ", config.compressed_vocab_size,
         "; the hash multipliers would rehash the whole engram table (wrong tokenizer for this model?)");
  if (config.pad_token_id < 0 || config.pad_token_id >= static_cast<int64_t>(token_map_.compressed_ids.size()))
    fail("Engram: `engram_pad_token_id` ", config.pad_token_id, " is outside the tokenizer's ",
         token_map_.compressed_ids.size(), " tokens");
  pad_id_ = token_map_.compressed_ids[static_cast<std::size_t>(config.pad_token_id)];
}

EngramHashState EngramHasher::new_state() const {
  EngramHashState state;
  state.lookback_.assign(static_cast<std::size_t>(layout_.max_ngram_size - 1), kEngramDead);
  return state;
}

EngramHashState EngramHasher::state_from(std::span<const int64_t> lookback) const {
  if (static_cast<int64_t>(lookback.size()) != layout_.max_ngram_size - 1)
    fail("Engram: a look-back of ", lookback.size(), " ids, this model keeps ", layout_.max_ngram_size - 1);
  for (int64_t id : lookback)
    if (id != kEngramDead && (id < 0 || id >= token_map_.compressed_vocab_size))
      fail("Engram: look-back id ", id, " outside the compressed vocabulary of ", token_map_.compressed_vocab_size);
  EngramHashState state;
  state.lookback_.assign(lookback.begin(), lookback.end());
  return state;
}

std::vector<int64_t> EngramHasher::hash(EngramHashState& state, std::span<const int32_t> tokens) const {
  const auto context = static_cast<std::size_t>(layout_.max_ngram_size - 1);
  if (state.lookback_.size() != context) fail("Engram: hash state was not made by this model's new_state()");
  const std::size_t n = static_cast<std::size_t>(layout_.max_ngram_size);
  const auto layers = static_cast<std::size_t>(layout_.layers);
  const auto heads = static_cast<std::size_t>(layout_.heads);
  const auto cols = static_cast<std::size_t>(layout_.cols());

  // [look-back | this chunk] of compressed ids.
  std::vector<int64_t> history(state.lookback_.begin(), state.lookback_.end());
  for (int32_t token : tokens) {
    const bool known = token >= 0 && static_cast<std::size_t>(token) < token_map_.compressed_ids.size();
    const int32_t compressed = known ? token_map_.compressed_ids[static_cast<std::size_t>(token)] : kNoCompressedId;
    history.push_back(compressed == kNoCompressedId ? kEngramDead : compressed);
  }

  std::vector<int64_t> out(tokens.size() * layers * cols);
  std::vector<int64_t> gram(n);
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    bool blocked = false;
    for (std::size_t shift = 0; shift < n; ++shift) {
      const int64_t source = history[context + t - shift];
      blocked = blocked || source == kEngramDead;
      gram[shift] = blocked ? pad_id_ : source;
    }
    for (std::size_t layer = 0; layer < layers; ++layer) {
      const int64_t* multiplier = &multipliers_[layer * n];
      // Wrapping products as torch's int64 does; they stay below 2^63 for ids in range.
      auto product = [&](std::size_t i) {
        return static_cast<int64_t>(static_cast<uint64_t>(gram[i]) * static_cast<uint64_t>(multiplier[i]));
      };
      int64_t rolling = product(0);
      for (std::size_t i = 1; i < n; ++i) {
        rolling ^= product(i);  // now the hash of the (i+1)-gram
        for (std::size_t head = 0; head < heads; ++head) {
          const std::size_t col = (i - 1) * heads + head;
          out[(t * layers + layer) * cols + col] =
              floor_mod(rolling, layout_.primes[layer * cols + col]) + layout_.offsets[layer * cols + col];
        }
      }
    }
  }
  state.lookback_.assign(history.end() - static_cast<std::ptrdiff_t>(context), history.end());
  return out;
}

}  // namespace deepinfer::model

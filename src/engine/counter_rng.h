#pragma once
// Counter-based random numbers for sampling. A draw is a pure function of (seed, request_id,
// position, draw index): no generator state is carried between calls, so a request's tokens do not
// depend on what else is in the batch, on the order requests are sampled in, or on the thread.
#include <array>
#include <cstdint>

namespace deepinfer::engine {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a bijection
// of the 128-bit counter for each 64-bit key, statistically strong enough (BigCrush) that
// consecutive counters give independent-looking outputs.
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// The random stream of one token choice. The key is the seed; the counter packs
// (draw index, position, request_id): 32 bits, 32 bits, 64 bits.
class CounterRng {
 public:
  // Throws deepinfer::Error when position is outside [0, 2^32): it must fit its counter word.
  CounterRng(uint64_t seed, uint64_t request_id, int64_t position);

  // 128 random bits: the Philox block for this draw index.
  PhiloxCounter block(uint32_t draw_index) const;

  // Uniform in [0, 1) with 53 random bits, from the first two words of block(draw_index).
  double uniform(uint32_t draw_index) const;

 private:
  PhiloxKey key_;
  uint32_t position_;
  uint64_t request_id_;
};

// A fresh seed for a request that gave none, from std::random_device. The engine reports it so
// the request can be replayed.
uint64_t draw_engine_seed();
// The seed of the request_id-th request of an engine started with `engine_seed` (EngineOptions::
// seed): SplitMix64's mix of the two, so neighbouring ids get unrelated seeds.
uint64_t seed_for_request(uint64_t engine_seed, uint64_t request_id);

}  // namespace deepinfer::engine

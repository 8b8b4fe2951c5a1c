#include "engine/counter_rng.h"

#include <random>

#include "core/error.h"
#include "core/int_math.h"

namespace deepinfer::engine {
namespace {

// Multipliers and Weyl key increments from the Philox paper (4x32 variant).
constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kKeyIncrement0 = 0x9E3779B9u;
constexpr uint32_t kKeyIncrement1 = 0xBB67AE85u;
constexpr int kRounds = 10;

PhiloxCounter philox_round(const PhiloxCounter& x, const PhiloxKey& key) {
  const uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * x[0];
  const uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * x[2];
  const auto high0 = static_cast<uint32_t>(product0 >> 32), low0 = static_cast<uint32_t>(product0);
  const auto high1 = static_cast<uint32_t>(product1 >> 32), low1 = static_cast<uint32_t>(product1);
  return {high1 ^ x[1] ^ key[0], low1, high0 ^ x[3] ^ key[1], low0};
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key[0] += kKeyIncrement0;
      key[1] += kKeyIncrement1;
    }
    counter = philox_round(counter, key);
  }
  return counter;
}

CounterRng::CounterRng(uint64_t seed, uint64_t request_id, int64_t position)
    : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
      position_(static_cast<uint32_t>(position)),
      request_id_(request_id) {
  if (position < 0 || position > int64_t{0xFFFFFFFF})
    fail("sampler: position ", position, " is outside [0, 2^32) and cannot key the random stream");
}

PhiloxCounter CounterRng::block(uint32_t draw_index) const {
  return philox4x32_10({draw_index, position_, static_cast<uint32_t>(request_id_),
                        static_cast<uint32_t>(request_id_ >> 32)},
                       key_);
}

double CounterRng::uniform(uint32_t draw_index) const {
  const PhiloxCounter bits = block(draw_index);
  const uint64_t mantissa = ((static_cast<uint64_t>(bits[0]) << 32) | bits[1]) >> 11;  // 53 bits
  return static_cast<double>(mantissa) * 0x1.0p-53;
}

uint64_t draw_engine_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

uint64_t seed_for_request(uint64_t engine_seed, uint64_t request_id) {
  return splitmix64_mix(engine_seed + (request_id + 1) * 0x9E3779B97F4A7C15ull);
}

}  // namespace deepinfer::engine

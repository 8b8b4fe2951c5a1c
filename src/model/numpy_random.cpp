#include "model/numpy_random.h"

#include <array>

#include "core/error.h"

namespace deepinfer::model {
namespace {

// numpy/random/bit_generator.pyx: SeedSequence's hash constants (pool of 4 uint32 words).
constexpr uint32_t kInitA = 0x43b0d7e5;
constexpr uint32_t kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd;
constexpr uint32_t kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd;
constexpr uint32_t kMixMultR = 0x4973f715;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

class SeedSequence {
 public:
  explicit SeedSequence(uint64_t seed) {
    // The integer entropy as little-endian 32-bit words, at least one.
    std::vector<uint32_t> entropy;
    do {
      entropy.push_back(static_cast<uint32_t>(seed));
      seed >>= 32;
    } while (seed != 0);

    uint32_t hash_const = kInitA;
    auto hashmix = [&hash_const](uint32_t value) {
      value ^= hash_const;
      hash_const *= kMultA;
      value *= hash_const;
      return value ^ (value >> kXShift);
    };
    auto mix = [](uint32_t x, uint32_t y) {
      uint32_t result = kMixMultL * x - kMixMultR * y;
      return result ^ (result >> kXShift);
    };
    for (int i = 0; i < kPoolSize; ++i) pool_[i] = hashmix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0);
    for (int src = 0; src < kPoolSize; ++src)
      for (int dst = 0; dst < kPoolSize; ++dst)
        if (src != dst) pool_[dst] = mix(pool_[dst], hashmix(pool_[src]));
    for (std::size_t src = kPoolSize; src < entropy.size(); ++src)
      for (int dst = 0; dst < kPoolSize; ++dst) pool_[dst] = mix(pool_[dst], hashmix(entropy[src]));
  }

  // generate_state(n, uint64): 2n uint32 words, paired little-endian.
  template <std::size_t N>
  std::array<uint64_t, N> generate_state64() const {
    std::array<uint64_t, N> out{};
    uint32_t hash_const = kInitB;
    for (std::size_t i = 0; i < 2 * N; ++i) {
      uint32_t value = pool_[i % kPoolSize];
      value ^= hash_const;
      hash_const *= kMultB;
      value *= hash_const;
      value ^= value >> kXShift;
      out[i / 2] |= static_cast<uint64_t>(value) << (32 * (i % 2));
    }
    return out;
  }

 private:
  std::array<uint32_t, kPoolSize> pool_{};
};

__extension__ typedef unsigned __int128 u128;  // PCG64 state; g++ and clang both have it

class Pcg64 {
 public:
  explicit Pcg64(const SeedSequence& seeds) {
    const auto words = seeds.generate_state64<4>();
    // The first two words are the state seed, the last two the stream, high word first.
    const u128 initstate = (static_cast<u128>(words[0]) << 64) | words[1];
    const u128 initseq = (static_cast<u128>(words[2]) << 64) | words[3];
    increment_ = (initseq << 1) | 1;
    state_ = 0;
    step();
    state_ += initstate;
    step();
  }

  uint64_t next64() {
    step();
    const uint64_t folded = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rotation = static_cast<unsigned>(state_ >> 122);
    return (folded >> rotation) | (folded << ((64 - rotation) & 63));
  }

  // Two 32-bit draws per 64-bit one, low half first.
  uint32_t next32() {
    if (has_high_half_) {
      has_high_half_ = false;
      return high_half_;
    }
    const uint64_t next = next64();
    has_high_half_ = true;
    high_half_ = static_cast<uint32_t>(next >> 32);
    return static_cast<uint32_t>(next);
  }

 private:
  void step() {
    constexpr u128 kMultiplier = (static_cast<u128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;
    state_ = state_ * kMultiplier + increment_;
  }

  u128 state_ = 0;
  u128 increment_ = 0;
  bool has_high_half_ = false;
  uint32_t high_half_ = 0;
};

// Lemire's nearly-divisionless bounded draws in [0, range], as numpy's
// random_bounded_uint64_fill picks them (32-bit draws when the range fits).
uint64_t bounded_64(Pcg64& rng, uint64_t range) {
  const uint64_t exclusive = range + 1;
  u128 product = static_cast<u128>(rng.next64()) * exclusive;
  uint64_t leftover = static_cast<uint64_t>(product);
  if (leftover < exclusive) {
    const uint64_t threshold = (UINT64_MAX - range) % exclusive;
    while (leftover < threshold) {
      product = static_cast<u128>(rng.next64()) * exclusive;
      leftover = static_cast<uint64_t>(product);
    }
  }
  return static_cast<uint64_t>(product >> 64);
}

uint32_t bounded_32(Pcg64& rng, uint32_t range) {
  const uint32_t exclusive = range + 1;
  uint64_t product = static_cast<uint64_t>(rng.next32()) * exclusive;
  uint32_t leftover = static_cast<uint32_t>(product);
  if (leftover < exclusive) {
    const uint32_t threshold = (UINT32_MAX - range) % exclusive;
    while (leftover < threshold) {
      product = static_cast<uint64_t>(rng.next32()) * exclusive;
      leftover = static_cast<uint32_t>(product);
    }
  }
  return static_cast<uint32_t>(product >> 32);
}

}  // namespace

std::vector<int64_t> numpy_default_rng_integers(uint64_t seed, int64_t high, int64_t count) {
  if (high < 1) fail("numpy_default_rng_integers: high must be at least 1, got ", high);
  if (count < 0) fail("numpy_default_rng_integers: negative count ", count);
  Pcg64 rng{SeedSequence(seed)};
  const uint64_t range = static_cast<uint64_t>(high) - 1;  // inclusive, as numpy hands it on
  std::vector<int64_t> out(static_cast<std::size_t>(count));
  for (int64_t& value : out) {
    if (range == 0) value = 0;
    else if (range == UINT32_MAX) value = rng.next32();
    else if (range < UINT32_MAX) value = bounded_32(rng, static_cast<uint32_t>(range));
    else value = static_cast<int64_t>(bounded_64(rng, range));
  }
  return out;
}

}  // namespace deepinfer::model

#pragma once
// Integer helpers the layers share.
#include <cstdint>

namespace deepinfer {

// a / b rounded up, for a >= 0 and b > 0.
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// SplitMix64's output function: a well-mixed 64-bit value of z (request seeds, router hashes).
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace deepinfer

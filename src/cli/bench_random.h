#pragma once
// Seeded draws for the benchmark's arrivals and synthetic prompts. std::mt19937_64's output is fixed
// by the standard but the std:: distributions are not, so the same --seed gives the same run on any
// standard library only if the conversions below are our own.
#include <cstdint>
#include <random>

namespace deepinfer::cli::bench {

using Rng = std::mt19937_64;

// Uniform in [0, 1) from the top 53 bits.
inline double uniform_unit(Rng& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Uniform in [0, n), n > 0 (the modulo bias is below 2^-40 for any n a benchmark uses).
inline uint64_t uniform_below(Rng& rng, uint64_t n) { return rng() % n; }

}  // namespace deepinfer::cli::bench

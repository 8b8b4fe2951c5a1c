#pragma once
// Bit-exact reproduction of the numpy draws Engram's hash multipliers come from:
// `numpy.random.default_rng(seed).integers(0, high, size=count, dtype=numpy.int64)`, i.e.
// SeedSequence(seed) -> PCG64 (XSL-RR 128/64) -> Lemire's bounded integers (numpy >= 1.17; the
// algorithm numpy documents as stable for Generator streams). Verified against numpy by
// tests/model/engram_multipliers_test.cpp.
#include <cstdint>
#include <vector>

namespace deepinfer::model {

// `count` integers in [0, high), high >= 1, from a generator seeded with the non-negative `seed`.
std::vector<int64_t> numpy_default_rng_integers(uint64_t seed, int64_t high, int64_t count);

}  // namespace deepinfer::model

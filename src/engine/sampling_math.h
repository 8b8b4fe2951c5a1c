#pragma once
// Vocabulary-wide loops of the sampler, written so the compiler vectorizes them and so their
// floating-point results do not depend on how it does: reductions use a fixed lane layout.
#include <cstdint>
#include <span>

namespace deepinfer::engine {

// values[i] = exp((values[i] - max_value) / divisor), in place (one array: no aliasing check
// that could send the loop down its scalar path), for arguments <= 0 (the sampler's only use):
// relative error about 1e-7; an argument below -87.3 (including -inf) gives exactly 0.
// Cephes-style range reduction and polynomial, branch-free so that it vectorizes (std::exp
// does not, and is the bulk of a sampling step otherwise).
void exp_of_shifted_in_place(std::span<float> values, float max_value, float divisor);

// Largest value (values must not contain NaN); -inf for an empty span.
float max_of(std::span<const float> values);

// Lowest index holding the largest value: argmax with ties to the lowest id.
int32_t argmax_lowest_index(std::span<const float> values);

// Sum in double over 8 interleaved lanes (lane = index % 8), combined in lane order: one fixed
// reduction order whatever the vector width.
double sum_of(std::span<const float> values);

// Inverse CDF: the lowest index at which the running sum of `weights` (non-negative, not all 0)
// exceeds uniform * sum_of(weights). The running sum advances in double by blocks of 8 weights,
// each summed in index order; a fixed order, like sum_of's. Zero weights are never returned.
int32_t invert_cdf(std::span<const float> weights, double uniform);

}  // namespace deepinfer::engine

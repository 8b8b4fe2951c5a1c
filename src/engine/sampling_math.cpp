#include "engine/sampling_math.h"

#include <bit>
#include <cmath>
#include <limits>

namespace deepinfer::engine {
namespace {

constexpr size_t kLanes = 8;

// Integer operations only for the range test and selects: with the default -ftrapping-math GCC
// will not vectorize a float comparison feeding a select, nor std::floor.
inline float exp_nonpositive(float x) {
  constexpr float kLowest = -87.33654f;  // exp(kLowest) is the smallest normal float
  // For x <= 0 (and -inf), x < kLowest exactly when its bits, read as uint32, are larger: the
  // sign bit is set and the magnitude is larger (+0 has the smallest bits of all).
  const int32_t lowest_bits = std::bit_cast<int32_t>(kLowest);
  const int32_t x_bits = std::bit_cast<int32_t>(x);
  const int32_t underflows =  // all ones or zero
      -static_cast<int32_t>(std::bit_cast<uint32_t>(x) > std::bit_cast<uint32_t>(kLowest));
  const float clamped = std::bit_cast<float>((x_bits & ~underflows) | (lowest_bits & underflows));
  // n = round(clamped / ln 2); truncating (clamped / ln 2 - 0.5) rounds a non-positive value.
  const auto n = static_cast<int32_t>(clamped * 1.44269504088896341f - 0.5f);
  const auto n_float = static_cast<float>(n);
  // ln 2 split in two so that n * 0.693359375 is exact.
  const float r = (clamped - n_float * 0.693359375f) - n_float * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float result = p * std::bit_cast<float>((n + 127) << 23);
  return std::bit_cast<float>(std::bit_cast<int32_t>(result) & ~underflows);
}

}  // namespace

void exp_of_shifted_in_place(std::span<float> values, float max_value, float divisor) {
  float* data = values.data();
  const size_t count = values.size();
  for (size_t i = 0; i < count; ++i) data[i] = exp_nonpositive((data[i] - max_value) / divisor);
}

float max_of(std::span<const float> values) {
  float lanes[kLanes];
  for (float& lane : lanes) lane = -std::numeric_limits<float>::infinity();
  const size_t full = values.size() - values.size() % kLanes;
  for (size_t i = 0; i < full; i += kLanes)
    for (size_t lane = 0; lane < kLanes; ++lane)
      lanes[lane] = values[i + lane] > lanes[lane] ? values[i + lane] : lanes[lane];
  float best = -std::numeric_limits<float>::infinity();
  for (float lane : lanes) best = lane > best ? lane : best;
  for (size_t i = full; i < values.size(); ++i) best = values[i] > best ? values[i] : best;
  return best;
}

int32_t argmax_lowest_index(std::span<const float> values) {
  const float best = max_of(values);
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] == best) return static_cast<int32_t>(i);
  return 0;
}

double sum_of(std::span<const float> values) {
  double lanes[kLanes] = {};
  const size_t full = values.size() - values.size() % kLanes;
  for (size_t i = 0; i < full; i += kLanes)
    for (size_t lane = 0; lane < kLanes; ++lane) lanes[lane] += values[i + lane];
  for (size_t i = full; i < values.size(); ++i) lanes[i % kLanes] += values[i];
  double total = 0.0;
  for (double lane : lanes) total += lane;
  return total;
}

int32_t invert_cdf(std::span<const float> weights, double uniform) {
  const double target = uniform * sum_of(weights);
  double mass = 0.0;
  size_t block_start = 0;
  for (; block_start + kLanes <= weights.size(); block_start += kLanes) {
    double block_mass = 0.0;
    for (size_t lane = 0; lane < kLanes; ++lane) block_mass += weights[block_start + lane];
    if (mass + block_mass > target) break;
    mass += block_mass;
  }
  for (size_t i = block_start; i < weights.size(); ++i) {
    if (weights[i] <= 0.0f) continue;
    mass += weights[i];
    if (mass > target) return static_cast<int32_t>(i);
  }
  // Rounding left the target at the very top of the mass: the last token that has any.
  for (size_t i = weights.size(); i-- > 0;)
    if (weights[i] > 0.0f) return static_cast<int32_t>(i);
  return 0;
}

}  // namespace deepinfer::engine

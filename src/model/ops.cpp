#include "model/ops.h"

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace deepinfer::model {

void rms_norm(const float* x, int64_t n, const float* weight, float eps, float* out) {
  double sum_squares = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
  const float inverse_rms = 1.0f / std::sqrt(static_cast<float>(sum_squares / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) {
    const float normalized = x[i] * inverse_rms;
    out[i] = weight ? weight[i] * normalized : normalized;
  }
}

void softmax(float* x, int64_t n) {
  float max_value = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max_value = std::fmax(max_value, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] /= sum;
}

// Four 8-lane partial sums: element 32m + 8q + j goes to lane j of sum q by FMA in increasing m;
// then sums (0 + 1) + (2 + 3), the lanes in a fixed tree ((j, j+4), (j, j+2), (0, 1)), and the
// last n % 32 elements one by one by FMA. The order depends on n alone, so a dot product gives
// the same bits however many rows, heads or sequences its caller handles; the four sums keep the
// FMA unit busy where one chain would wait on its latency. The portable branch does the same
// operations in the same order (same bits, slowly).
namespace {

#ifdef __AVX2__
// The lane tree dot() ends with: the four accumulators, then halves down to one lane.
inline float sum_accumulators(const __m256 (&sums)[4]) {
  const __m256 total = _mm256_add_ps(_mm256_add_ps(sums[0], sums[1]), _mm256_add_ps(sums[2], sums[3]));
  __m128 half = _mm_add_ps(_mm256_castps256_ps128(total), _mm256_extractf128_ps(total, 1));
  half = _mm_add_ps(half, _mm_movehl_ps(half, half));
  half = _mm_add_ss(half, _mm_movehdup_ps(half));
  return _mm_cvtss_f32(half);
}
#endif

}  // namespace

float dot(const float* a, const float* b, int64_t n) {
  const int64_t vector_end = n / 32 * 32;
#ifdef __AVX2__
  __m256 sums[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t i = 0; i < vector_end; i += 32)
    for (int q = 0; q < 4; ++q)
      sums[q] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * q), _mm256_loadu_ps(b + i + 8 * q), sums[q]);
  float sum = sum_accumulators(sums);
#else
  float sums[4][8] = {};
  for (int64_t i = 0; i < vector_end; i += 32)
    for (int q = 0; q < 4; ++q)
      for (int j = 0; j < 8; ++j) sums[q][j] = std::fma(a[i + 8 * q + j], b[i + 8 * q + j], sums[q][j]);
  float lanes[8];
  for (int j = 0; j < 8; ++j) lanes[j] = (sums[0][j] + sums[1][j]) + (sums[2][j] + sums[3][j]);
  for (int j = 0; j < 4; ++j) lanes[j] += lanes[j + 4];
  for (int j = 0; j < 2; ++j) lanes[j] += lanes[j + 2];
  float sum = lanes[0] + lanes[1];
#endif
  for (int64_t i = vector_end; i < n; ++i) sum = std::fma(a[i], b[i], sum);
  return sum;
}

void dots(const float* a, const float* const* rows, int64_t count, int64_t n, float* out) {
  int64_t r = 0;
#ifdef __AVX2__
  // Two rows at a time: their accumulator chains interleave, and a's loads serve both.
  const int64_t vector_end = n / 32 * 32;
  for (; r + 2 <= count; r += 2) {
    const float* b0 = rows[r];
    const float* b1 = rows[r + 1];
    __m256 sums0[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 sums1[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < vector_end; i += 32)
      for (int q = 0; q < 4; ++q) {
        const __m256 x = _mm256_loadu_ps(a + i + 8 * q);
        sums0[q] = _mm256_fmadd_ps(x, _mm256_loadu_ps(b0 + i + 8 * q), sums0[q]);
        sums1[q] = _mm256_fmadd_ps(x, _mm256_loadu_ps(b1 + i + 8 * q), sums1[q]);
      }
    float sum0 = sum_accumulators(sums0), sum1 = sum_accumulators(sums1);
    for (int64_t i = vector_end; i < n; ++i) {
      sum0 = std::fma(a[i], b0[i], sum0);
      sum1 = std::fma(a[i], b1[i], sum1);
    }
    out[r] = sum0;
    out[r + 1] = sum1;
  }
#endif
  for (; r < count; ++r) out[r] = dot(a, rows[r], n);
}

}  // namespace deepinfer::model

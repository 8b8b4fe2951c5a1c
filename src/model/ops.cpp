#include "model/ops.h"

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

float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace deepinfer::model

#pragma once
// The small elementwise steps of the V4 forward pass (norms, activations, softmax), as plain loops.
// Every reduction runs in one fixed order per row, so a row's result never depends on how many
// tokens were processed with it (chunked prefill and decode stay bit-identical to one-shot).
#include <cmath>
#include <cstdint>

namespace deepinfer::model {

// out = weight * x / sqrt(mean(x^2) + eps); weight may be null (unweighted). out may alias x.
void rms_norm(const float* x, int64_t n, const float* weight, float eps, float* out);

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch's softplus (beta 1, threshold 20): linear above the threshold.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// In-place softmax over n values.
void softmax(float* x, int64_t n);

float dot(const float* a, const float* b, int64_t n);
// out[j] = dot(a, rows[j], n) for j < count, bit for bit, several rows at a time.
void dots(const float* a, const float* const* rows, int64_t count, int64_t n, float* out);

}  // namespace deepinfer::model

#pragma once
// What the CUDA kernel tests share: random activations, weights in every checkpoint encoding
// built on the host (as tests/kernels/linear_test.cpp builds them) and copied to the device
// `misalign` bytes past an aligned address, the CPU's linear as the reference, and comparisons.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"
#include "cuda/cuda_test_support.h"
#include "kernels/kernels.h"

namespace deepinfer::kernels::cuda_testing_weights {

using cuda_testing::DeviceBytes;
using cuda_testing::to_device;

inline std::vector<float> random_floats(std::size_t count, std::mt19937& rng, float spread = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> normal(mean, spread);
  std::vector<float> out(count);
  for (auto& value : out) value = normal(rng);
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// |got - expected| <= relative * |expected| + absolute, NaN exactly where expected is NaN.
inline ::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& expected, double relative,
                                 double absolute) {
  if (got.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " and " << expected.size();
  int failures = 0;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  std::string message;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = expected[i];
    const bool ok = std::isnan(e) ? std::isnan(g) : std::fabs(g - e) <= relative * std::fabs(e) + absolute;
    if (!ok && failures++ < 5) message += str_cat(" [", i, "] got ", g, " expected ", e, ";");
  }
  if (failures > 0) return ::testing::AssertionFailure() << failures << " mismatches:" << message;
  return result;
}

// ---------------------------------------------------------------------------------------------
// Weights: built on the host (as tests/kernels/linear_test.cpp builds them), copied to the device
// `misalign` bytes past an aligned address.

struct HostWeight {
  WeightMatrix matrix;  // host pointers into data / scales
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
};

inline int64_t scale_count(const WeightMatrix& m) {
  if (m.encoding == WeightEncoding::FP8_E4M3)
    return ((m.rows + m.block_rows - 1) / m.block_rows) * ((m.cols + m.block_cols - 1) / m.block_cols);
  if (m.encoding == WeightEncoding::FP4_E2M1) return m.rows * (m.cols / m.block_cols);
  return 0;
}

inline HostWeight make_weight(WeightEncoding encoding, int64_t rows, int64_t cols, std::mt19937& rng,
                       ScaleEncoding scale_encoding = ScaleEncoding::E8M0, int64_t block_rows = 128,
                       int64_t block_cols = 128) {
  HostWeight w;
  WeightMatrix& m = w.matrix;
  m.encoding = encoding;
  m.rows = rows;
  m.cols = cols;
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t data_bytes = 0;
  switch (encoding) {
    case WeightEncoding::F32: data_bytes = rows * cols * 4; break;
    case WeightEncoding::BF16: data_bytes = rows * cols * 2; break;
    case WeightEncoding::FP8_E4M3: data_bytes = rows * cols; break;
    case WeightEncoding::FP4_E2M1: data_bytes = rows * cols / 2; break;
  }
  w.data.resize(static_cast<std::size_t>(data_bytes));
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (encoding == WeightEncoding::F32) {
      const float value = normal(rng);
      std::memcpy(w.data.data() + i * 4, &value, 4);
    } else if (encoding == WeightEncoding::BF16) {
      const uint16_t bits = float_to_bf16(normal(rng));
      std::memcpy(w.data.data() + i * 2, &bits, 2);
    }
  }
  if (encoding == WeightEncoding::FP8_E4M3 || encoding == WeightEncoding::FP4_E2M1) {
    for (auto& b : w.data) {
      b = static_cast<uint8_t>(byte(rng));
      if (encoding == WeightEncoding::FP8_E4M3 && (b & 0x7F) == 0x7F) b ^= 0x01;  // not NaN
    }
    m.block_rows = block_rows;
    m.block_cols = block_cols;
    m.scale_encoding = scale_encoding;
    const int64_t count = scale_count(m);
    w.scales.resize(static_cast<std::size_t>(count * 4));
    std::uniform_int_distribution<int> exponent(121, 131);
    std::uniform_real_distribution<float> f32_scale(0.001f, 0.1f);
    for (int64_t i = 0; i < count; ++i) {
      if (scale_encoding == ScaleEncoding::E8M0) {
        w.scales[static_cast<std::size_t>(i)] = static_cast<uint8_t>(exponent(rng));
      } else {
        const float value = f32_scale(rng);
        std::memcpy(w.scales.data() + i * 4, &value, 4);
      }
    }
  }
  m.data = w.data.data();
  m.scales = w.scales.empty() ? nullptr : w.scales.data();
  return w;
}

// The same weight with every element's sign cleared (scales are positive already): its products
// with |x| bound the rounding error of any summation order.
inline HostWeight absolute(const HostWeight& w) {
  HostWeight out = w;
  switch (w.matrix.encoding) {
    case WeightEncoding::F32:
      for (std::size_t i = 3; i < out.data.size(); i += 4) out.data[i] &= 0x7F;
      break;
    case WeightEncoding::BF16:
      for (std::size_t i = 1; i < out.data.size(); i += 2) out.data[i] &= 0x7F;
      break;
    case WeightEncoding::FP8_E4M3:
      for (auto& b : out.data) b &= 0x7F;
      break;
    case WeightEncoding::FP4_E2M1:
      for (auto& b : out.data) b &= 0x77;
      break;
  }
  out.matrix.data = out.data.data();
  out.matrix.scales = out.scales.empty() ? nullptr : out.scales.data();
  return out;
}

struct DeviceWeight {
  WeightMatrix matrix;  // device pointers
  DeviceBytes data, scales;
};

inline DeviceWeight upload(const HostWeight& w, std::size_t misalign = 0) {
  DeviceWeight d;
  d.matrix = w.matrix;
  d.data = to_device(w.data, misalign);
  d.matrix.data = d.data.at<uint8_t>(misalign);
  if (!w.scales.empty()) {
    d.scales = to_device(w.scales, misalign);
    d.matrix.scales = d.scales.at<uint8_t>(misalign);
  } else {
    d.matrix.scales = nullptr;
  }
  return d;
}

inline std::vector<float> cpu_linear(const std::vector<float>& x, int64_t tokens, const WeightMatrix& host_weight) {
  std::vector<float> y(static_cast<std::size_t>(tokens * host_weight.rows));
  kernels::linear(x.data(), tokens, host_weight, y.data());
  return y;
}

}  // namespace deepinfer::kernels::cuda_testing_weights

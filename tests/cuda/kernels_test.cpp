// The CUDA kernels of kernels/cuda against the CPU implementations they mirror: kernels::linear
// for every weight encoding, model::rms_norm, RopeTable::apply, the hyper-connection steps, and
// the MoE routing written out from model/moe.cpp. Plus the properties the backend relies on:
// linear's batch invariance (bit for bit), linear_gathered equal to linear, zero sizes, large
// grids, and check_launch turning a CUDA error into deepinfer::Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_formats.h"
#include "cuda/cuda_test_support.h"
#include "cuda/kernel_test_support.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"
#include "model/hyper_connections.h"
#include "model/ops.h"
#include "model/rope.h"

namespace deepinfer::kernels::cuda {
namespace {

using cuda_testing::DeviceBytes;
using cuda_testing::from_device;
using cuda_testing::synchronize;
using cuda_testing::to_device;

constexpr Stream kDefaultStream = nullptr;

using namespace cuda_testing_weights;


// GPU linear of `x` ([tokens, cols]), with x placed `x_offset` floats into its allocation.
// split: a kLinearSplitFloats workspace, so that calls of few blocks run column ranges on blocks
// of their own (without one, each block walks its ranges).
std::vector<float> gpu_linear(const std::vector<float>& x, int64_t tokens, const WeightMatrix& device_weight,
                              std::size_t x_offset = 0, bool split = false) {
  const DeviceBytes dx = to_device(x, x_offset * sizeof(float));
  DeviceBytes dy(static_cast<std::size_t>(tokens * device_weight.rows) * sizeof(float) + 4);
  DeviceBytes workspace(split ? static_cast<std::size_t>(kLinearSplitFloats) * sizeof(float) : 4);
  LinearWorkspace ws;
  if (split) ws.split = workspace.at<float>();
  linear(dx.at<float>(x_offset * sizeof(float)), tokens, device_weight, dy.at<float>(), kDefaultStream, ws);
  synchronize();
  return from_device(dy.at<float>(), static_cast<std::size_t>(tokens * device_weight.rows));
}

std::string describe(const WeightMatrix& m, int64_t tokens, std::size_t misalign) {
  return str_cat("enc=", static_cast<int>(m.encoding), " scale=", static_cast<int>(m.scale_encoding), " ", m.rows,
                 "x", m.cols, " block ", m.block_rows, "x", m.block_cols, " tokens=", tokens, " misalign=", misalign);
}

// The GPU result is within 1e-5 of sum |x w| of the CPU's (both are f32 sums in some order).
void expect_linear_matches_cpu(const HostWeight& w, int64_t tokens, std::mt19937& rng, std::size_t misalign) {
  const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens * w.matrix.cols), rng);
  std::vector<float> x_abs = x;
  for (auto& v : x_abs) v = std::fabs(v);
  const std::vector<float> expected = cpu_linear(x, tokens, w.matrix);
  const HostWeight w_abs = absolute(w);
  const std::vector<float> magnitude = cpu_linear(x_abs, tokens, w_abs.matrix);
  const DeviceWeight d = upload(w, misalign);
  const std::vector<float> got = gpu_linear(x, tokens, d.matrix, misalign % 2);
  ASSERT_EQ(got.size(), expected.size());
  int failures = 0;
  for (std::size_t i = 0; i < got.size() && failures < 5; ++i) {
    bool ok;
    if (std::isnan(expected[i])) ok = std::isnan(got[i]);
    else if (std::isinf(expected[i])) ok = got[i] == expected[i];
    else
      ok = std::fabs(double{got[i]} - expected[i]) <=
           1e-5 * magnitude[i] + static_cast<double>(w.matrix.cols) * 1e-44;
    if (!ok) {
      ++failures;
      ADD_FAILURE() << describe(w.matrix, tokens, misalign) << ": y[" << i / w.matrix.rows << ", "
                    << i % w.matrix.rows << "] = " << got[i] << ", CPU " << expected[i] << " (sum |x w| "
                    << magnitude[i] << ")";
    }
  }
}

TEST(CudaLinear, DenseEncodingsMatchCpu) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(1);
  for (auto encoding : {WeightEncoding::F32, WeightEncoding::BF16})
    for (int64_t rows : {1, 5, 130})
      for (int64_t cols : {7, 32, 200, 4096})
        for (int64_t tokens : {1, 3, 17})
          for (std::size_t misalign : {0, 3}) {
            const HostWeight w = make_weight(encoding, rows, cols, rng);
            expect_linear_matches_cpu(w, tokens, rng, misalign);
          }
}

TEST(CudaLinear, Fp8BlockScalesMatchCpu) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(2);
  struct Blocks {
    ScaleEncoding scales;
    int64_t rows, cols;
  };
  for (const Blocks blocks : {Blocks{ScaleEncoding::E8M0, 128, 128}, Blocks{ScaleEncoding::E8M0, 32, 32},
                              Blocks{ScaleEncoding::F32, 128, 128}, Blocks{ScaleEncoding::None, 128, 128},
                              Blocks{ScaleEncoding::E8M0, 3, 5}})
    for (int64_t rows : {5, 130, 300})
      for (int64_t cols : {7, 200, 300, 1024})
        for (int64_t tokens : {1, 3, 17})
          for (std::size_t misalign : {0, 3}) {
            const HostWeight w =
                make_weight(WeightEncoding::FP8_E4M3, rows, cols, rng, blocks.scales, blocks.rows, blocks.cols);
            expect_linear_matches_cpu(w, tokens, rng, misalign);
          }
}

TEST(CudaLinear, Fp4GroupScalesMatchCpu) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(3);
  for (auto scales : {ScaleEncoding::E8M0, ScaleEncoding::F32})
    for (int64_t rows : {5, 130})
      for (int64_t cols : {32, 96, 2048})
        for (int64_t tokens : {1, 3, 17})
          for (std::size_t misalign : {0, 3}) {
            const HostWeight w = make_weight(WeightEncoding::FP4_E2M1, rows, cols, rng, scales, 1, 32);
            expect_linear_matches_cpu(w, tokens, rng, misalign);
          }
}

TEST(CudaLinear, NanCodesGiveNanLikeCpu) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(4);
  HostWeight fp8 = make_weight(WeightEncoding::FP8_E4M3, 40, 300, rng, ScaleEncoding::E8M0, 32, 32);
  fp8.data[2 * 300 + 17] = 0x7F;  // row 2: a NaN element
  fp8.data[9 * 300 + 290] = 0xFF;  // row 9 too, in the last (partial) block of columns
  fp8.scales[(33 / 32) * 10 + 4] = 255;  // rows 32..39, columns 128..159: a NaN scale
  expect_linear_matches_cpu(fp8, 3, rng, 0);
  HostWeight fp4 = make_weight(WeightEncoding::FP4_E2M1, 6, 64, rng, ScaleEncoding::E8M0, 1, 32);
  fp4.scales[3 * 2 + 1] = 255;  // row 3, second group
  expect_linear_matches_cpu(fp4, 3, rng, 0);
}

TEST(CudaLinear, ZeroColumnsGiveZerosAndEmptyCallsDoNothing) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(5);
  HostWeight w = make_weight(WeightEncoding::F32, 4, 0, rng);
  w.matrix.data = nullptr;
  DeviceWeight d = upload(w);
  d.matrix.data = nullptr;
  DeviceBytes dy(4 * 2 * sizeof(float));
  std::vector<float> junk(8, 7.0f);
  dy.upload(junk.data(), junk.size() * sizeof(float));
  linear(nullptr, 2, d.matrix, dy.at<float>(), kDefaultStream);
  synchronize();
  EXPECT_EQ(from_device(dy.at<float>(), 8), std::vector<float>(8, 0.0f));
  const HostWeight some = make_weight(WeightEncoding::BF16, 3, 8, rng);
  const DeviceWeight ds = upload(some);
  EXPECT_NO_THROW(linear(nullptr, 0, ds.matrix, nullptr, kDefaultStream));
  EXPECT_NO_THROW(linear_gathered(nullptr, nullptr, 0, nullptr, nullptr, 3, 8, nullptr, kDefaultStream));
  synchronize();
}

TEST(CudaLinear, RefusesBadDescriptors) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(6);
  const HostWeight w = make_weight(WeightEncoding::FP4_E2M1, 2, 64, rng, ScaleEncoding::E8M0, 1, 32);
  DeviceWeight d = upload(w);
  WeightMatrix bad = d.matrix;
  bad.cols = 48;  // not a multiple of the group size
  EXPECT_THROW(linear(nullptr, 1, bad, nullptr, kDefaultStream), Error);
  bad = d.matrix;
  bad.scales = nullptr;
  EXPECT_THROW(linear(nullptr, 1, bad, nullptr, kDefaultStream), Error);
  EXPECT_THROW(linear(nullptr, -1, d.matrix, nullptr, kDefaultStream), Error);
}

// A row's result has the same bits alone (tokens = 1) or at any position of a 70-token batch,
// whether the loads were vectorised or not (misaligned x or weights), and whether a weight's
// column ranges ran on blocks of their own (a split workspace, small calls) or were walked.
TEST(CudaLinear, BatchInvariantBitForBit) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(7);
  std::vector<HostWeight> weights;
  weights.push_back(make_weight(WeightEncoding::F32, 70, 203, rng));
  weights.push_back(make_weight(WeightEncoding::BF16, 70, 1000, rng));
  weights.push_back(make_weight(WeightEncoding::FP8_E4M3, 130, 300, rng, ScaleEncoding::E8M0, 128, 128));
  weights.push_back(make_weight(WeightEncoding::FP8_E4M3, 33, 301, rng, ScaleEncoding::F32, 32, 32));
  weights.push_back(make_weight(WeightEncoding::FP4_E2M1, 70, 512, rng, ScaleEncoding::E8M0, 1, 32));
  // The real model's few-row, many-column shapes (mHC fn, router, a 32x32 FP8).
  weights.push_back(make_weight(WeightEncoding::F32, 24, 20480, rng));
  weights.push_back(make_weight(WeightEncoding::BF16, 384, 5120, rng));
  weights.push_back(make_weight(WeightEncoding::FP8_E4M3, 64, 5120, rng, ScaleEncoding::E8M0, 32, 32));
  // 70 tokens: F32 weights then take linear_rows_kernel (64 or more), one token linear_kernel.
  constexpr int64_t kTokens = 70;
  for (const HostWeight& w : weights) {
    const int64_t cols = w.matrix.cols;
    const int64_t rows = w.matrix.rows;
    const std::vector<float> x = random_floats(static_cast<std::size_t>(kTokens * cols), rng);
    const DeviceWeight d = upload(w);
    const std::vector<float> batch = gpu_linear(x, kTokens, d.matrix);
    for (int64_t t = 0; t < kTokens; ++t) {
      const std::vector<float> one_x(x.begin() + t * cols, x.begin() + (t + 1) * cols);
      const std::vector<float> in_batch(batch.begin() + t * rows, batch.begin() + (t + 1) * rows);
      EXPECT_TRUE(same_bits(gpu_linear(one_x, 1, d.matrix), in_batch))
          << describe(w.matrix, kTokens, 0) << ": token " << t;
      if (t % 7 == 0) {
        EXPECT_TRUE(same_bits(gpu_linear(one_x, 1, d.matrix, 0, /*split=*/true), in_batch))
            << describe(w.matrix, 1, 0) << ", ranges on blocks of their own: token " << t;
      }
    }
    EXPECT_TRUE(same_bits(gpu_linear(x, kTokens, d.matrix, 0, /*split=*/true), batch))
        << describe(w.matrix, kTokens, 0) << " with a split workspace";
    // Other batch sizes, the scalar x path, and the byte-wise weight path: the same bits.
    for (int64_t tokens : {int64_t{2}, int64_t{9}, int64_t{16}}) {
      const std::vector<float> prefix(x.begin(), x.begin() + tokens * cols);
      const std::vector<float> expected(batch.begin(), batch.begin() + tokens * rows);
      EXPECT_TRUE(same_bits(gpu_linear(prefix, tokens, d.matrix), expected)) << describe(w.matrix, tokens, 0);
      EXPECT_TRUE(same_bits(gpu_linear(prefix, tokens, d.matrix, 0, /*split=*/true), expected))
          << describe(w.matrix, tokens, 0) << " with a split workspace";
    }
    EXPECT_TRUE(same_bits(gpu_linear(x, kTokens, d.matrix, 1), batch)) << describe(w.matrix, kTokens, 0) << " x+1";
    const DeviceWeight misaligned = upload(w, 3);
    EXPECT_TRUE(same_bits(gpu_linear(x, kTokens, misaligned.matrix), batch)) << describe(w.matrix, kTokens, 3);
  }
}

// Grids past 65535 token tiles (the y loop) and a vocabulary-sized row count.
TEST(CudaLinear, LargeGrids) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(8);
  const HostWeight small = make_weight(WeightEncoding::F32, 3, 5, rng);
  const int64_t many_tokens = 65535 * 8 + 1000;
  const std::vector<float> x = random_floats(static_cast<std::size_t>(many_tokens * 5), rng);
  const DeviceWeight d = upload(small);
  EXPECT_TRUE(close(gpu_linear(x, many_tokens, d.matrix), cpu_linear(x, many_tokens, small.matrix), 1e-5, 1e-5));
  const HostWeight vocab = make_weight(WeightEncoding::BF16, 129280, 16, rng);
  const std::vector<float> x2 = random_floats(3 * 16, rng);
  const DeviceWeight dv = upload(vocab);
  EXPECT_TRUE(close(gpu_linear(x2, 3, dv.matrix), cpu_linear(x2, 3, vocab.matrix), 1e-5, 1e-5));
}

// linear_gathered: each pair's row equals linear's for its x row and weight, bit for bit; a
// negative weight_of gives zeros.
TEST(CudaLinearGathered, EqualsLinearPerPair) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(9);
  struct Case {
    WeightEncoding encoding;
    ScaleEncoding scales;
    int64_t block_rows, block_cols, rows, cols;
  };
  for (const Case c : {Case{WeightEncoding::FP8_E4M3, ScaleEncoding::E8M0, 128, 128, 130, 200},
                       Case{WeightEncoding::FP4_E2M1, ScaleEncoding::E8M0, 1, 32, 67, 256},
                       Case{WeightEncoding::BF16, ScaleEncoding::None, 1, 1, 20, 77}}) {
    constexpr int kExperts = 4;
    std::vector<HostWeight> host;
    std::vector<DeviceWeight> device;
    std::vector<WeightMatrix> descriptors;
    for (int e = 0; e < kExperts; ++e) {
      host.push_back(make_weight(c.encoding, c.rows, c.cols, rng, c.scales, c.block_rows, c.block_cols));
      device.push_back(upload(host.back(), e == 2 ? 3 : 0));  // one expert misaligned
      descriptors.push_back(device.back().matrix);
    }
    constexpr int64_t kXRows = 9;
    const std::vector<float> x = random_floats(static_cast<std::size_t>(kXRows * c.cols), rng);
    // Runs of one expert (as a sorted dispatch makes them), singles, and skipped pairs.
    const std::vector<int32_t> weight_of = {0, 0, 0, 1, 3, 3, -1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, -1, -1, 0, 3, 3};
    const auto pairs = static_cast<int64_t>(weight_of.size());
    std::vector<int32_t> x_row(weight_of.size());
    std::uniform_int_distribution<int32_t> pick(0, kXRows - 1);
    for (auto& r : x_row) r = pick(rng);
    const DeviceBytes dx = to_device(x), drow = to_device(x_row), dwhich = to_device(weight_of),
                      ddesc = to_device(descriptors);
    DeviceBytes dy(static_cast<std::size_t>(pairs * c.rows) * sizeof(float));
    linear_gathered(dx.at<float>(), drow.at<int32_t>(), pairs, ddesc.at<WeightMatrix>(), dwhich.at<int32_t>(), c.rows,
                    c.cols, dy.at<float>(), kDefaultStream);
    synchronize();
    const std::vector<float> y = from_device(dy.at<float>(), static_cast<std::size_t>(pairs * c.rows));
    for (int64_t p = 0; p < pairs; ++p) {
      const std::vector<float> got(y.begin() + p * c.rows, y.begin() + (p + 1) * c.rows);
      if (weight_of[p] < 0) {
        EXPECT_EQ(got, std::vector<float>(static_cast<std::size_t>(c.rows), 0.0f)) << "pair " << p;
        continue;
      }
      const std::vector<float> xp(x.begin() + x_row[p] * c.cols, x.begin() + (x_row[p] + 1) * c.cols);
      // Bit for bit the plain kernel's row, which the linear tests hold to the CPU within 1e-5
      // of sum |x w| (a plain relative bound is wrong where the sum cancels).
      const std::vector<float> alone = gpu_linear(xp, 1, device[weight_of[p]].matrix);
      EXPECT_TRUE(same_bits(got, alone)) << describe(descriptors[0], 1, 0) << ": pair " << p;
    }
  }
}

// ---------------------------------------------------------------------------------------------

TEST(CudaRmsNorm, MatchesModelRmsNorm) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(10);
  constexpr int64_t kCount = 5;
  for (int64_t n : {1, 7, 512, 4096, 4097, 7168})
    for (bool weighted : {false, true})
      for (bool in_place : {false, true}) {
        const std::vector<float> x = random_floats(static_cast<std::size_t>(kCount * n), rng, 3.0f, 0.5f);
        const std::vector<float> weight = random_floats(static_cast<std::size_t>(n), rng, 1.0f, 1.0f);
        std::vector<float> expected(x.size());
        for (int64_t t = 0; t < kCount; ++t)
          model::rms_norm(x.data() + t * n, n, weighted ? weight.data() : nullptr, 1e-6f, expected.data() + t * n);
        DeviceBytes dx = to_device(x);
        const DeviceBytes dw = to_device(weight);
        DeviceBytes dout(x.size() * sizeof(float));
        float* out = in_place ? dx.at<float>() : dout.at<float>();
        rms_norm(dx.at<float>(), kCount, n, weighted ? dw.at<float>() : nullptr, 1e-6f, out, kDefaultStream);
        synchronize();
        EXPECT_TRUE(close(from_device(out, x.size()), expected, 1e-6, 1e-30))
            << "n=" << n << " weighted=" << weighted << " in_place=" << in_place;
      }
}

TEST(CudaRmsNorm, ManyRows) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(11);
  constexpr int64_t kCount = 70000, kN = 16;
  const std::vector<float> x = random_floats(static_cast<std::size_t>(kCount * kN), rng);
  std::vector<float> expected(x.size());
  for (int64_t t = 0; t < kCount; ++t) model::rms_norm(x.data() + t * kN, kN, nullptr, 1e-5f, expected.data() + t * kN);
  DeviceBytes dx = to_device(x);
  rms_norm(dx.at<float>(), kCount, kN, nullptr, 1e-5f, dx.at<float>(), kDefaultStream);
  synchronize();
  EXPECT_TRUE(close(from_device(dx.at<float>(), x.size()), expected, 1e-6, 1e-30));
}

TEST(CudaRope, MatchesRopeTable) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(12);
  YarnScaling yarn;
  yarn.factor = 16;
  yarn.original_max_position_embeddings = 4096;
  yarn.beta_fast = 32;
  yarn.beta_slow = 1;
  for (const model::RopeTable& table : {model::RopeTable::plain(10000.0, 64), model::RopeTable::yarn(160000.0, 64, yarn)})
    for (bool inverse : {false, true}) {
      constexpr int64_t kCount = 5, kHeads = 3, kHeadDim = 96;
      const std::vector<int32_t> positions = {0, 1, 4095, 65535, 1000003};
      const std::vector<float> x = random_floats(static_cast<std::size_t>(kCount * kHeads * kHeadDim), rng);
      std::vector<float> expected = x;
      for (int64_t t = 0; t < kCount; ++t)
        for (int64_t h = 0; h < kHeads; ++h)
          table.apply(expected.data() + (t * kHeads + h) * kHeadDim, kHeadDim, positions[t], inverse);
      DeviceBytes dx = to_device(x);
      const DeviceBytes dfreq = to_device(table.inv_freq()), dpos = to_device(positions);
      rope(dx.at<float>(), kCount, kHeads, kHeadDim, table.rope_dims(), dfreq.at<float>(), dpos.at<int32_t>(), inverse,
           kDefaultStream);
      synchronize();
      EXPECT_TRUE(close(from_device(dx.at<float>(), x.size()), expected, 1e-5, 1e-5)) << "inverse=" << inverse;
    }
}

// The fused launch gives rms_norm's then rope's bits, on the warp rows (head_dim <= 1024) and on
// the block rows it hands to the two kernels.
TEST(CudaRmsNormRope, GivesRmsNormThenRopesBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(13);
  const model::RopeTable table = model::RopeTable::plain(10000.0, 64);
  const std::vector<int32_t> positions = {0, 1, 4095, 65535, 1000003, 7};
  constexpr int64_t kCount = 6;
  for (int64_t heads : {1, 3, 64})
    for (int64_t head_dim : {64, 96, 512, 1280})
      for (bool weighted : {false, true}) {
        const int64_t rows = kCount * heads;
        const std::vector<float> x = random_floats(static_cast<std::size_t>(rows * head_dim), rng, 3.0f, 0.5f);
        const std::vector<float> weight = random_floats(static_cast<std::size_t>(head_dim), rng, 1.0f, 1.0f);
        const DeviceBytes dw = to_device(weight), dfreq = to_device(table.inv_freq()), dpos = to_device(positions);
        const float* w = weighted ? dw.at<float>() : nullptr;
        DeviceBytes two = to_device(x), fused = to_device(x);
        rms_norm(two.at<float>(), rows, head_dim, w, 1e-6f, two.at<float>(), kDefaultStream);
        rope(two.at<float>(), kCount, heads, head_dim, table.rope_dims(), dfreq.at<float>(), dpos.at<int32_t>(), false,
             kDefaultStream);
        rms_norm_rope(fused.at<float>(), kCount, heads, head_dim, w, 1e-6f, table.rope_dims(), dfreq.at<float>(),
                      dpos.at<int32_t>(), kDefaultStream);
        synchronize();
        const std::vector<float> expected = from_device(two.at<float>(), x.size());
        const std::vector<float> got = from_device(fused.at<float>(), x.size());
        EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), x.size() * sizeof(float)))
            << "heads=" << heads << " head_dim=" << head_dim << " weighted=" << weighted;
      }
}

// ---------------------------------------------------------------------------------------------
// Hyper-connections: the kernels composed the way the model composes them (rms_norm -> linear ->
// hc_mix / hc_head_pre -> hc_collapse) against model/hyper_connections.cpp.

struct HcFixture {
  model::HyperConnectionShape shape{4, 64, 20, 1e-6f, 1e-6f};
  std::vector<float> fn_values;
  model::HyperConnectionWeights weights;

  HcFixture(int64_t fn_rows, int64_t scale_count, std::mt19937& rng, int64_t streams = 4) {
    shape.streams = streams;
    const int64_t width = shape.streams * shape.hidden;
    fn_values = random_floats(static_cast<std::size_t>(fn_rows * width), rng, 0.1f);
    weights.fn.encoding = WeightEncoding::F32;
    weights.fn.rows = fn_rows;
    weights.fn.cols = width;
    weights.fn.data = fn_values.data();
    weights.base = random_floats(static_cast<std::size_t>(fn_rows), rng, 0.5f);
    weights.scale = random_floats(static_cast<std::size_t>(scale_count), rng, 0.3f, 1.0f);
  }
};

// rms_norm + linear on the device: the projected mixing logits [tokens, fn.rows].
DeviceBytes device_mix_logits(const HcFixture& f, const DeviceBytes& streams, int64_t tokens, DeviceBytes& fn_storage) {
  const int64_t width = f.shape.streams * f.shape.hidden;
  fn_storage = to_device(f.fn_values);
  WeightMatrix fn = f.weights.fn;
  fn.data = fn_storage.get();
  DeviceBytes normalized(static_cast<std::size_t>(tokens * width) * sizeof(float));
  rms_norm(streams.at<float>(), tokens, width, nullptr, f.shape.norm_eps, normalized.at<float>(), kDefaultStream);
  DeviceBytes logits(static_cast<std::size_t>(tokens * fn.rows) * sizeof(float));
  linear(normalized.at<float>(), tokens, fn, logits.at<float>(), kDefaultStream);
  synchronize();  // before `normalized` is freed
  return logits;
}

// n = 4 (V4's hc_mult) runs the kernel compiled for 4 streams, n = 3 the one for any count.
TEST(CudaHyperConnections, MixMatchesHyperMix) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(13);
  for (const int64_t n : {int64_t{4}, int64_t{3}}) {
    SCOPED_TRACE("streams " + std::to_string(n));
    HcFixture f((2 + n) * n, 3, rng, n);
    for (int64_t iters : {1, 2, 20}) {
      f.shape.sinkhorn_iters = iters;
      constexpr int64_t kTokens = 7;
      const std::vector<float> streams = random_floats(static_cast<std::size_t>(kTokens * n * f.shape.hidden), rng);
      const model::HyperMix expected = model::hyper_mix(f.weights, f.shape, streams.data(), kTokens);
      const DeviceBytes dstreams = to_device(streams);
      DeviceBytes fn_storage;
      const DeviceBytes logits = device_mix_logits(f, dstreams, kTokens, fn_storage);
      const DeviceBytes dbase = to_device(f.weights.base), dscale = to_device(f.weights.scale);
      DeviceBytes pre(kTokens * n * sizeof(float)), post(kTokens * n * sizeof(float)),
          comb(kTokens * n * n * sizeof(float));
      hc_mix(logits.at<float>(), kTokens, n, dbase.at<float>(), dscale.at<float>(), f.shape.hc_eps, iters,
             pre.at<float>(), post.at<float>(), comb.at<float>(), kDefaultStream);
      synchronize();
      EXPECT_TRUE(close(from_device(pre.at<float>(), kTokens * n), expected.pre, 1e-5, 1e-6)) << "iters " << iters;
      EXPECT_TRUE(close(from_device(post.at<float>(), kTokens * n), expected.post, 1e-5, 1e-6)) << "iters " << iters;
      EXPECT_TRUE(close(from_device(comb.at<float>(), kTokens * n * n), expected.comb, 1e-4, 1e-5)) << "iters " << iters;
    }
  }
}

// hc_enter in one launch against hc_mix, hc_collapse, copy_floats and rms_norm: the same bits
// in pre, post, comb, the carried pre and the normed rows, with and without a carried pre, at
// widths the fused kernel takes (more than 1024, some not a multiple of its 256 threads); and
// it declines the widths rms_norm runs on a warp, and stream counts other than 4. With a carried
// pre, hc_collapse_norm then hc_mix into the carried pre (the backend's entry with the mix on
// its own lane) give hc_enter's bits too, and hc_collapse_norm declines what hc_enter does.
TEST(CudaHyperConnections, EnterGivesTheFourKernelsBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(16);
  constexpr int64_t n = 4, kTokens = 5;
  for (const int64_t d : {int64_t{1040}, int64_t{4096}, int64_t{5120}, int64_t{7168}})
    for (const bool carried : {false, true}) {
      SCOPED_TRACE("d " + std::to_string(d) + (carried ? " carried" : ""));
      const std::vector<float> logits = random_floats(static_cast<std::size_t>(kTokens * (2 + n) * n), rng, 2.0f);
      const std::vector<float> base = random_floats(static_cast<std::size_t>((2 + n) * n), rng, 0.5f);
      const std::vector<float> scale = random_floats(3, rng, 0.3f, 1.0f);
      const std::vector<float> streams = random_floats(static_cast<std::size_t>(kTokens * n * d), rng, 3.0f);
      const std::vector<float> norm = random_floats(static_cast<std::size_t>(d), rng, 1.0f, 1.0f);
      const std::vector<float> previous = random_floats(static_cast<std::size_t>(kTokens * n), rng, 0.5f, 0.5f);
      const DeviceBytes dlogits = to_device(logits), dbase = to_device(base), dscale = to_device(scale),
                        dstreams = to_device(streams), dnorm = to_device(norm);
      struct Outputs {
        explicit Outputs(int64_t width, const std::vector<float>& carried_pre)
            : out(static_cast<std::size_t>(kTokens * width) * sizeof(float)), carried(to_device(carried_pre)) {}
        DeviceBytes pre{kTokens * n * sizeof(float)}, post{kTokens * n * sizeof(float)},
            comb{kTokens * n * n * sizeof(float)}, out, carried;
      } four(d, previous), one(d, previous), split(d, previous);
      float* four_carried = carried ? four.carried.at<float>() : nullptr;
      hc_mix(dlogits.at<float>(), kTokens, n, dbase.at<float>(), dscale.at<float>(), 1e-6f, 20, four.pre.at<float>(),
             four.post.at<float>(), four.comb.at<float>(), kDefaultStream);
      hc_collapse(carried ? four_carried : four.pre.at<float>(), dstreams.at<float>(), kTokens, n, d,
                  four.out.at<float>(), kDefaultStream);
      if (carried) copy_floats(four_carried, four.pre.at<float>(), kTokens * n, kDefaultStream);
      rms_norm(four.out.at<float>(), kTokens, d, dnorm.at<float>(), 1e-6f, four.out.at<float>(), kDefaultStream);
      ASSERT_TRUE(hc_enter(dlogits.at<float>(), kTokens, n, dbase.at<float>(), dscale.at<float>(), 1e-6f, 20,
                           one.pre.at<float>(), one.post.at<float>(), one.comb.at<float>(),
                           carried ? one.carried.at<float>() : nullptr, dstreams.at<float>(), d, dnorm.at<float>(),
                           1e-6f, one.out.at<float>(), kDefaultStream));
      if (carried) {
        ASSERT_TRUE(hc_collapse_norm(split.carried.at<float>(), dstreams.at<float>(), kTokens, n, d, dnorm.at<float>(),
                                     1e-6f, split.out.at<float>(), kDefaultStream));
        hc_mix(dlogits.at<float>(), kTokens, n, dbase.at<float>(), dscale.at<float>(), 1e-6f, 20,
               split.carried.at<float>(), split.post.at<float>(), split.comb.at<float>(), kDefaultStream);
      }
      synchronize();
      auto same = [](const DeviceBytes& a, const DeviceBytes& b, std::size_t count) {
        const std::vector<float> x = from_device(a.at<float>(), count), y = from_device(b.at<float>(), count);
        return std::memcmp(x.data(), y.data(), count * sizeof(float)) == 0;
      };
      EXPECT_TRUE(same(four.pre, one.pre, kTokens * n));
      EXPECT_TRUE(same(four.post, one.post, kTokens * n));
      EXPECT_TRUE(same(four.comb, one.comb, kTokens * n * n));
      EXPECT_TRUE(same(four.carried, one.carried, kTokens * n));
      EXPECT_TRUE(same(four.out, one.out, static_cast<std::size_t>(kTokens * d)));
      if (carried) {
        EXPECT_TRUE(same(split.post, one.post, kTokens * n));
        EXPECT_TRUE(same(split.comb, one.comb, kTokens * n * n));
        EXPECT_TRUE(same(split.carried, one.carried, kTokens * n));
        EXPECT_TRUE(same(split.out, one.out, static_cast<std::size_t>(kTokens * d)));
      }
    }
  EXPECT_FALSE(hc_enter(nullptr, 1, 4, nullptr, nullptr, 1e-6f, 20, nullptr, nullptr, nullptr, nullptr, nullptr, 1024,
                        nullptr, 1e-6f, nullptr, kDefaultStream));
  EXPECT_FALSE(hc_enter(nullptr, 1, 3, nullptr, nullptr, 1e-6f, 20, nullptr, nullptr, nullptr, nullptr, nullptr, 4096,
                        nullptr, 1e-6f, nullptr, kDefaultStream));
  EXPECT_FALSE(hc_collapse_norm(nullptr, nullptr, 1, 4, 1024, nullptr, 1e-6f, nullptr, kDefaultStream));
  EXPECT_FALSE(hc_collapse_norm(nullptr, nullptr, 1, 3, 4096, nullptr, 1e-6f, nullptr, kDefaultStream));
}

// hc_post_norm against hc_post then rms_norm of the flattened streams: the same streams and the
// same normed rows, bit for bit; it declines widths that are not a multiple of 256 and stream
// counts other than 4. hc_post_enter (V4.1's boundary in one launch) against hc_post_norm then
// hc_collapse_norm with a carried pre: the same streams, normed rows and sublayer input, at the
// widths hc_collapse_norm takes (declined at 512 and at 1300, not a multiple of 256).
TEST(CudaHyperConnections, PostNormGivesPostThenRmsNormsBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(17);
  constexpr int64_t kTokens = 5;
  constexpr int64_t n = 4;
  for (const int64_t d : {int64_t{512}, int64_t{4096}, int64_t{5120}, int64_t{7168}}) {
    SCOPED_TRACE("d " + std::to_string(d));
    const std::vector<float> post = random_floats(static_cast<std::size_t>(kTokens * n), rng, 1.0f, 1.0f);
    const std::vector<float> comb = random_floats(static_cast<std::size_t>(kTokens * n * n), rng, 0.5f, 0.25f);
    const std::vector<float> output = random_floats(static_cast<std::size_t>(kTokens * d), rng, 2.0f);
    const std::vector<float> streams = random_floats(static_cast<std::size_t>(kTokens * n * d), rng, 3.0f);
    const DeviceBytes dpost = to_device(post), dcomb = to_device(comb), doutput = to_device(output);
    const std::vector<float> carried = random_floats(static_cast<std::size_t>(kTokens * n), rng, 0.5f, 0.5f);
    const std::vector<float> norm = random_floats(static_cast<std::size_t>(d), rng, 1.0f, 1.0f);
    const DeviceBytes dcarried = to_device(carried), dnorm = to_device(norm);
    DeviceBytes two = to_device(streams), one = to_device(streams), fused = to_device(streams);
    const std::size_t flat_floats = static_cast<std::size_t>(kTokens * n * d);
    DeviceBytes two_flat(flat_floats * sizeof(float)), one_flat(flat_floats * sizeof(float)),
        fused_flat(flat_floats * sizeof(float));
    DeviceBytes one_entry(static_cast<std::size_t>(kTokens * d) * sizeof(float)),
        fused_entry(static_cast<std::size_t>(kTokens * d) * sizeof(float));
    hc_post(dpost.at<float>(), dcomb.at<float>(), doutput.at<float>(), kTokens, n, d, two.at<float>(), kDefaultStream);
    rms_norm(two.at<float>(), kTokens, n * d, nullptr, 1e-6f, two_flat.at<float>(), kDefaultStream);
    ASSERT_TRUE(hc_post_norm(dpost.at<float>(), dcomb.at<float>(), doutput.at<float>(), kTokens, n, d,
                             one.at<float>(), 1e-6f, one_flat.at<float>(), kDefaultStream));
    const bool enters = d > 1024;
    if (enters) {
      ASSERT_TRUE(hc_collapse_norm(dcarried.at<float>(), one.at<float>(), kTokens, n, d, dnorm.at<float>(), 1e-5f,
                                   one_entry.at<float>(), kDefaultStream));
    }
    EXPECT_EQ(hc_post_enter(dpost.at<float>(), dcomb.at<float>(), doutput.at<float>(), kTokens, n, d,
                            fused.at<float>(), 1e-6f, fused_flat.at<float>(), dcarried.at<float>(), dnorm.at<float>(),
                            1e-5f, fused_entry.at<float>(), kDefaultStream),
              enters);
    synchronize();
    auto same = [&](const DeviceBytes& a, const DeviceBytes& b, std::size_t floats) {
      const std::vector<float> x = from_device(a.at<float>(), floats), y = from_device(b.at<float>(), floats);
      return std::memcmp(x.data(), y.data(), floats * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(two, one, flat_floats));
    EXPECT_TRUE(same(two_flat, one_flat, flat_floats));
    if (enters) {
      EXPECT_TRUE(same(fused, one, flat_floats));
      EXPECT_TRUE(same(fused_flat, one_flat, flat_floats));
      EXPECT_TRUE(same(fused_entry, one_entry, static_cast<std::size_t>(kTokens * d)));
    }
  }
  EXPECT_FALSE(hc_post_norm(nullptr, nullptr, nullptr, 1, 4, 300, nullptr, 1e-6f, nullptr, kDefaultStream));
  EXPECT_FALSE(hc_post_norm(nullptr, nullptr, nullptr, 1, 3, 4096, nullptr, 1e-6f, nullptr, kDefaultStream));
  EXPECT_FALSE(hc_post_enter(nullptr, nullptr, nullptr, 1, 4, 1300, nullptr, 1e-6f, nullptr, nullptr, nullptr, 1e-6f,
                             nullptr, kDefaultStream));
  EXPECT_FALSE(hc_post_enter(nullptr, nullptr, nullptr, 1, 3, 4096, nullptr, 1e-6f, nullptr, nullptr, nullptr, 1e-6f,
                             nullptr, kDefaultStream));
}

TEST(CudaHyperConnections, HeadMatchesHyperHead) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(14);
  const int64_t n = 4;
  const HcFixture f(n, 1, rng);
  constexpr int64_t kTokens = 6;
  const int64_t d = f.shape.hidden;
  const std::vector<float> streams = random_floats(static_cast<std::size_t>(kTokens * n * d), rng);
  std::vector<float> expected(static_cast<std::size_t>(kTokens * d));
  model::hyper_head(f.weights, f.shape, streams.data(), kTokens, expected.data());
  const DeviceBytes dstreams = to_device(streams);
  DeviceBytes fn_storage;
  const DeviceBytes logits = device_mix_logits(f, dstreams, kTokens, fn_storage);
  const DeviceBytes dbase = to_device(f.weights.base), dscale = to_device(f.weights.scale);
  DeviceBytes pre(kTokens * n * sizeof(float)), collapsed(static_cast<std::size_t>(kTokens * d) * sizeof(float));
  hc_head_pre(logits.at<float>(), kTokens, n, dbase.at<float>(), dscale.at<float>(), f.shape.hc_eps, pre.at<float>(),
              kDefaultStream);
  hc_collapse(pre.at<float>(), dstreams.at<float>(), kTokens, n, d, collapsed.at<float>(), kDefaultStream);
  synchronize();
  EXPECT_TRUE(close(from_device(collapsed.at<float>(), expected.size()), expected, 1e-5, 1e-5));
}

TEST(CudaHyperConnections, CollapseAndPostMatchModel) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(15);
  const model::HyperConnectionShape shape{4, 300, 20, 1e-6f, 1e-6f};
  const int64_t n = shape.streams, d = shape.hidden;
  constexpr int64_t kTokens = 5;
  const std::vector<float> streams = random_floats(static_cast<std::size_t>(kTokens * n * d), rng);
  const std::vector<float> output = random_floats(static_cast<std::size_t>(kTokens * d), rng);
  model::HyperMix mix{random_floats(kTokens * n, rng, 0.3f, 0.5f), random_floats(kTokens * n, rng, 0.5f, 1.0f),
                      random_floats(kTokens * n * n, rng, 0.2f, 0.25f)};

  std::vector<float> collapsed(static_cast<std::size_t>(kTokens * d));
  model::hyper_collapse(mix.pre.data(), shape, streams.data(), kTokens, collapsed.data());
  std::vector<float> posted = streams;
  model::hyper_post(mix, shape, output.data(), kTokens, posted.data());

  DeviceBytes dstreams = to_device(streams);
  const DeviceBytes dout = to_device(output), dpre = to_device(mix.pre), dpost = to_device(mix.post),
                    dcomb = to_device(mix.comb);
  DeviceBytes dcollapsed(collapsed.size() * sizeof(float));
  hc_collapse(dpre.at<float>(), dstreams.at<float>(), kTokens, n, d, dcollapsed.at<float>(), kDefaultStream);
  synchronize();
  EXPECT_TRUE(close(from_device(dcollapsed.at<float>(), collapsed.size()), collapsed, 1e-6, 1e-6));
  hc_post(dpost.at<float>(), dcomb.at<float>(), dout.at<float>(), kTokens, n, d, dstreams.at<float>(), kDefaultStream);
  synchronize();
  EXPECT_TRUE(close(from_device(dstreams.at<float>(), posted.size()), posted, 1e-6, 1e-6));
}

// ---------------------------------------------------------------------------------------------
// Routing, against moe_forward's routing loop (model/moe.cpp) written out here.

struct HostRouting {
  std::vector<float> scores;  // [tokens, experts]
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

HostRouting route_on_host(std::vector<float> logits, int64_t tokens, const RouterParams& p,
                          const std::vector<float>& bias, const std::vector<int32_t>& tid2eid,
                          const std::vector<int32_t>& token_ids) {
  const int64_t experts = p.experts, k = p.top_k;
  HostRouting out;
  std::vector<int32_t> order(static_cast<std::size_t>(experts));
  std::vector<float> biased(static_cast<std::size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    float* row = logits.data() + t * experts;
    if (p.gate_temperature != 1.0f)
      for (int64_t e = 0; e < experts; ++e) row[e] /= p.gate_temperature;
    switch (p.scoring) {
      case 0:
        for (int64_t e = 0; e < experts; ++e) row[e] = std::sqrt(model::softplus(row[e]));
        break;
      case 1:
        for (int64_t e = 0; e < experts; ++e) row[e] = model::sigmoid(row[e]);
        break;
      default: model::softmax(row, experts); break;
    }
    std::vector<int32_t> chosen;
    if (!tid2eid.empty()) {
      chosen.assign(tid2eid.begin() + token_ids[t] * k, tid2eid.begin() + (token_ids[t] + 1) * k);
    } else {
      for (int64_t e = 0; e < experts; ++e) biased[e] = row[e] + bias[e];
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
        return biased[a] != biased[b] ? biased[a] > biased[b] : a < b;
      });
      chosen.assign(order.begin(), order.begin() + k);
    }
    std::sort(chosen.begin(), chosen.end());
    float sum = 0.0f;
    std::vector<float> w;
    for (int32_t e : chosen) {
      w.push_back(row[e]);
      sum += row[e];
    }
    for (float& v : w) v = (p.renormalize ? v / (sum + p.renormalize_eps) : v) * p.routed_scaling;
    out.experts.insert(out.experts.end(), chosen.begin(), chosen.end());
    out.weights.insert(out.weights.end(), w.begin(), w.end());
  }
  out.scores = std::move(logits);
  return out;
}

struct DeviceRouting {
  std::vector<float> scores;
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

DeviceRouting route_on_device(const std::vector<float>& logits, int64_t tokens, const RouterParams& p,
                              const std::vector<float>& bias, const std::vector<int32_t>& tid2eid,
                              const std::vector<int32_t>& token_ids) {
  DeviceBytes dlogits = to_device(logits);
  const DeviceBytes dbias = to_device(bias), dtable = to_device(tid2eid), dids = to_device(token_ids);
  DeviceBytes dexperts(static_cast<std::size_t>(tokens * p.top_k) * sizeof(int32_t));
  DeviceBytes dweights(static_cast<std::size_t>(tokens * p.top_k) * sizeof(float));
  route(dlogits.at<float>(), tokens, p, bias.empty() ? nullptr : dbias.at<float>(),
        tid2eid.empty() ? nullptr : dtable.at<int32_t>(), token_ids.empty() ? nullptr : dids.at<int32_t>(),
        dexperts.at<int32_t>(), dweights.at<float>(), kDefaultStream);
  synchronize();
  return {from_device(dlogits.at<float>(), logits.size()),
          from_device(dexperts.at<int32_t>(), static_cast<std::size_t>(tokens * p.top_k)),
          from_device(dweights.at<float>(), static_cast<std::size_t>(tokens * p.top_k))};
}

RouterParams router(int32_t scoring, int64_t experts, int64_t top_k, float temperature, float scaling, bool renormalize,
                    float eps) {
  RouterParams p;
  p.scoring = scoring;
  p.experts = experts;
  p.top_k = top_k;
  p.gate_temperature = temperature;
  p.routed_scaling = scaling;
  p.renormalize = renormalize;
  p.renormalize_eps = eps;
  return p;
}

TEST(CudaRoute, TopKMatchesMoeRouting) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(16);
  for (const RouterParams& p : {router(0, 384, 8, 1.0f, 2.5f, true, 0.0f), router(1, 256, 6, 0.7f, 1.0f, true, 1e-20f),
                                router(2, 64, 4, 1.0f, 1.0f, false, 0.0f), router(2, 300, 1, 1.3f, 1.5f, true, 0.0f),
                                router(0, 8, 8, 1.0f, 1.0f, true, 0.0f)}) {
    constexpr int64_t kTokens = 17;
    const std::vector<float> logits = random_floats(static_cast<std::size_t>(kTokens * p.experts), rng, 2.0f);
    const std::vector<float> bias = random_floats(static_cast<std::size_t>(p.experts), rng, 0.3f);
    const HostRouting expected = route_on_host(logits, kTokens, p, bias, {}, {});
    const DeviceRouting got = route_on_device(logits, kTokens, p, bias, {}, {});
    const std::string what = str_cat("scoring ", p.scoring, " experts ", p.experts, " k ", p.top_k);
    EXPECT_EQ(got.experts, expected.experts) << what;
    EXPECT_TRUE(close(got.weights, expected.weights, 1e-5, 1e-7)) << what;
    EXPECT_TRUE(close(got.scores, expected.scores, 1e-5, 1e-7)) << what;
  }
}

TEST(CudaRoute, TiesGoToTheLowerExpert) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  constexpr int64_t kTokens = 3;
  const RouterParams p = router(0, 384, 8, 1.0f, 1.0f, true, 0.0f);
  std::vector<float> logits(static_cast<std::size_t>(kTokens * p.experts), 0.0f);
  std::vector<float> bias(static_cast<std::size_t>(p.experts), 0.0f);
  bias[300] = 1.0f;  // one clear winner, then seven ties broken by id
  logits[1 * p.experts + 200] = 5.0f;
  const DeviceRouting got = route_on_device(logits, kTokens, p, bias, {}, {});
  EXPECT_EQ(got.experts, route_on_host(logits, kTokens, p, bias, {}, {}).experts);
  EXPECT_EQ(std::vector<int32_t>(got.experts.begin(), got.experts.begin() + 8),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 300}));
  EXPECT_EQ(std::vector<int32_t>(got.experts.begin() + 8, got.experts.begin() + 16),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 200, 300}));
}

TEST(CudaRoute, HashRoutingReadsTheTable) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(17);
  constexpr int64_t kTokens = 11, kVocab = 50;
  RouterParams p = router(0, 64, 6, 1.0f, 1.5f, true, 0.0f);
  std::vector<int32_t> table;
  std::vector<int32_t> ids(64);
  std::iota(ids.begin(), ids.end(), 0);
  for (int64_t v = 0; v < kVocab; ++v) {
    std::shuffle(ids.begin(), ids.end(), rng);
    table.insert(table.end(), ids.begin(), ids.begin() + p.top_k);
  }
  std::vector<int32_t> token_ids(kTokens);
  std::uniform_int_distribution<int32_t> pick(0, kVocab - 1);
  for (auto& id : token_ids) id = pick(rng);
  const std::vector<float> logits = random_floats(static_cast<std::size_t>(kTokens * p.experts), rng, 2.0f);
  const HostRouting expected = route_on_host(logits, kTokens, p, {}, table, token_ids);
  const DeviceRouting got = route_on_device(logits, kTokens, p, {}, table, token_ids);
  EXPECT_EQ(got.experts, expected.experts);
  EXPECT_TRUE(close(got.weights, expected.weights, 1e-5, 1e-7));
  EXPECT_TRUE(close(got.scores, expected.scores, 1e-5, 1e-7));

  // With the table's size known, a token id outside it routes nowhere.
  p.tid2eid_rows = kVocab;
  token_ids[4] = kVocab;
  token_ids[7] = -3;
  const DeviceRouting checked = route_on_device(logits, kTokens, p, {}, table, token_ids);
  for (int64_t t : {4, 7})
    for (int64_t s = 0; s < p.top_k; ++s) {
      EXPECT_EQ(checked.experts[t * p.top_k + s], -1) << t;
      EXPECT_EQ(checked.weights[t * p.top_k + s], 0.0f) << t;
    }
  EXPECT_EQ(std::vector<int32_t>(checked.experts.begin(), checked.experts.begin() + 4 * p.top_k),
            std::vector<int32_t>(expected.experts.begin(), expected.experts.begin() + 4 * p.top_k));
}

TEST(CudaRoute, RefusesWhatItCannotRoute) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  EXPECT_THROW(route(nullptr, 1, router(0, 4, 8, 1, 1, true, 0), nullptr, nullptr, nullptr, nullptr, nullptr,
                     kDefaultStream),
               Error);
  EXPECT_THROW(route(nullptr, 1, router(3, 64, 8, 1, 1, true, 0), nullptr, nullptr, nullptr, nullptr, nullptr,
                     kDefaultStream),
               Error);
  EXPECT_NO_THROW(route(nullptr, 0, router(0, 64, 8, 1, 1, true, 0), nullptr, nullptr, nullptr, nullptr, nullptr,
                        kDefaultStream));
}

// ---------------------------------------------------------------------------------------------

TEST(CudaSwiglu, MatchesClampedSwiglu) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(18);
  constexpr int64_t kRows = 7, kInner = 300;
  for (float limit : {0.0f, 7.0f})
    for (bool scaled : {false, true}) {
      std::vector<float> gate = random_floats(kRows * kInner, rng, 10.0f);
      const std::vector<float> up = random_floats(kRows * kInner, rng, 10.0f);
      const std::vector<float> row_scale = random_floats(kRows, rng, 0.5f, 0.5f);
      gate[3] = NAN;
      DeviceBytes dgate = to_device(gate);
      const DeviceBytes dup = to_device(up), dscale = to_device(row_scale);
      std::vector<float> expected(gate.size());
      for (std::size_t i = 0; i < gate.size(); ++i) {
        float g = gate[i], u = up[i];
        if (limit > 0) {
          g = std::fmin(g, limit);
          u = std::clamp(u, -limit, limit);
        }
        expected[i] = model::silu(g) * u;
        if (scaled) expected[i] *= row_scale[i / kInner];
      }
      swiglu(dgate.at<float>(), dup.at<float>(), kRows, kInner, limit, scaled ? dscale.at<float>() : nullptr,
             kDefaultStream);
      synchronize();
      EXPECT_TRUE(close(from_device(dgate.at<float>(), gate.size()), expected, 1e-6, 1e-30))
          << "limit " << limit << " scaled " << scaled;
    }
}

// With row_of, slot i reads contribution row row_of[i] (a permutation, as moe_sort's position_of):
// the same bits as the rows gathered first.
TEST(CudaMoeCombine, SumsSlotsInOrderThenShared) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(19);
  constexpr int64_t kTokens = 5, kK = 3, kD = 70;
  const std::vector<float> contributions = random_floats(kTokens * kK * kD, rng);
  const std::vector<float> slot_scale = random_floats(kTokens * kK, rng, 0.3f, 0.3f);
  const std::vector<float> shared = random_floats(kTokens * kD, rng);
  std::vector<int64_t> row_of(kTokens * kK);
  std::iota(row_of.begin(), row_of.end(), int64_t{0});
  std::shuffle(row_of.begin(), row_of.end(), rng);
  std::vector<float> permuted(contributions.size());  // row row_of[i] of permuted = row i of contributions
  for (int64_t i = 0; i < kTokens * kK; ++i)
    std::copy_n(contributions.begin() + i * kD, kD, permuted.begin() + row_of[static_cast<std::size_t>(i)] * kD);
  const DeviceBytes dc = to_device(contributions), ds = to_device(slot_scale), dsh = to_device(shared),
                    dpermuted = to_device(permuted), drow_of = to_device(row_of);
  for (bool scaled : {false, true})
    for (bool with_shared : {false, true}) {
      std::vector<float> expected(kTokens * kD, 0.0f);
      for (int64_t t = 0; t < kTokens; ++t)
        for (int64_t s = 0; s < kK; ++s)
          for (int64_t c = 0; c < kD; ++c) {
            const float slot = contributions[(t * kK + s) * kD + c] * (scaled ? slot_scale[t * kK + s] : 1.0f);
            expected[t * kD + c] += slot;
          }
      if (with_shared)
        for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += shared[i];
      DeviceBytes dout(expected.size() * sizeof(float)), dout_rows(expected.size() * sizeof(float));
      moe_combine(dc.at<float>(), nullptr, scaled ? ds.at<float>() : nullptr, kTokens, kK, kD,
                  with_shared ? dsh.at<float>() : nullptr, dout.at<float>(), kDefaultStream);
      moe_combine(dpermuted.at<float>(), drow_of.at<int64_t>(), scaled ? ds.at<float>() : nullptr, kTokens, kK, kD,
                  with_shared ? dsh.at<float>() : nullptr, dout_rows.at<float>(), kDefaultStream);
      synchronize();
      const std::vector<float> out = from_device(dout.at<float>(), expected.size());
      EXPECT_TRUE(close(out, expected, 1e-6, 1e-6)) << "scaled " << scaled << " shared " << with_shared;
      const std::vector<float> out_rows = from_device(dout_rows.at<float>(), expected.size());
      EXPECT_EQ(std::memcmp(out.data(), out_rows.data(), out.size() * sizeof(float)), 0)
          << "scaled " << scaled << " shared " << with_shared;
    }
}

TEST(CudaRows, GatherRows) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(20);
  constexpr int64_t kWidth = 37;
  const std::vector<float> in = random_floats(10 * kWidth, rng);
  const std::vector<int64_t> rows = {3, 3, 0, 9, 5};
  std::vector<float> expected;
  for (int64_t r : rows) expected.insert(expected.end(), in.begin() + r * kWidth, in.begin() + (r + 1) * kWidth);
  const DeviceBytes din = to_device(in), drows = to_device(rows);
  DeviceBytes dout(expected.size() * sizeof(float));
  gather_rows(din.at<float>(), drows.at<int64_t>(), static_cast<int64_t>(rows.size()), kWidth, dout.at<float>(),
              kDefaultStream);
  synchronize();
  EXPECT_EQ(from_device(dout.at<float>(), expected.size()), expected);
}

TEST(CudaRows, EmbedCopiesTheRowIntoEveryStream) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(21);
  constexpr int64_t kVocab = 20, kWidth = 33, kCopies = 4;
  const std::vector<int32_t> ids = {7, 0, 19, 7, 20};  // the last is outside the table: zeros
  for (auto encoding : {WeightEncoding::F32, WeightEncoding::BF16})
    for (std::size_t misalign : {0, 1}) {
      const HostWeight table = make_weight(encoding, kVocab, kWidth, rng);
      const DeviceWeight dtable = upload(table, misalign);
      std::vector<float> row_values(static_cast<std::size_t>(kVocab * kWidth));
      for (int64_t i = 0; i < kVocab * kWidth; ++i) {
        if (encoding == WeightEncoding::F32) {
          std::memcpy(&row_values[i], table.data.data() + i * 4, 4);
        } else {
          uint16_t bits;
          std::memcpy(&bits, table.data.data() + i * 2, 2);
          row_values[i] = bf16_to_float(bits);
        }
      }
      std::vector<float> expected;
      for (int32_t id : ids)
        for (int64_t copy = 0; copy < kCopies; ++copy)
          for (int64_t c = 0; c < kWidth; ++c) expected.push_back(id < kVocab ? row_values[id * kWidth + c] : 0.0f);
      const DeviceBytes dids = to_device(ids);
      DeviceBytes dstreams(expected.size() * sizeof(float));
      embed(dtable.matrix, dids.at<int32_t>(), static_cast<int64_t>(ids.size()), kCopies, dstreams.at<float>(),
            kDefaultStream);
      synchronize();
      EXPECT_EQ(from_device(dstreams.at<float>(), expected.size()), expected)
          << "encoding " << static_cast<int>(encoding) << " misalign " << misalign;
    }
}

TEST(CudaKernels, ZeroSizedCallsLaunchNothing) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  WeightMatrix table;
  table.rows = 4;
  table.cols = 8;
  EXPECT_NO_THROW(rms_norm(nullptr, 0, 16, nullptr, 1e-6f, nullptr, kDefaultStream));
  EXPECT_NO_THROW(rope(nullptr, 0, 4, 64, 64, nullptr, nullptr, false, kDefaultStream));
  EXPECT_NO_THROW(embed(table, nullptr, 0, 4, nullptr, kDefaultStream));
  EXPECT_NO_THROW(hc_mix(nullptr, 0, 4, nullptr, nullptr, 1e-6f, 20, nullptr, nullptr, nullptr, kDefaultStream));
  EXPECT_NO_THROW(hc_head_pre(nullptr, 0, 4, nullptr, nullptr, 1e-6f, nullptr, kDefaultStream));
  EXPECT_NO_THROW(hc_collapse(nullptr, nullptr, 0, 4, 64, nullptr, kDefaultStream));
  EXPECT_NO_THROW(hc_post(nullptr, nullptr, nullptr, 0, 4, 64, nullptr, kDefaultStream));
  EXPECT_NO_THROW(swiglu(nullptr, nullptr, 0, 64, 7.0f, nullptr, kDefaultStream));
  EXPECT_NO_THROW(moe_combine(nullptr, nullptr, nullptr, 0, 8, 64, nullptr, nullptr, kDefaultStream));
  EXPECT_NO_THROW(gather_rows(nullptr, nullptr, 0, 64, nullptr, kDefaultStream));
  synchronize();
}

TEST(CudaKernels, CheckLaunchReportsTheLastError) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  EXPECT_NO_THROW(check_launch("nothing failed"));
  void* pointer = nullptr;
  ASSERT_NE(cudaMalloc(&pointer, std::size_t{1} << 62), cudaSuccess);  // records an error
  try {
    check_launch("the huge allocation");
    ADD_FAILURE() << "check_launch did not throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("the huge allocation"), std::string::npos) << error.what();
  }
  EXPECT_NO_THROW(check_launch("after the error was read"));
}

// moe_sort: a stable order by expert (ties keep pair order), tokens = pair / top_k, and
// position_of the inverse permutation.
TEST(CudaMoeSort, OrdersPairsByExpertStably) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(21);
  for (const int64_t pairs : {int64_t{1}, int64_t{6}, int64_t{384}, int64_t{3072}}) {
    const int64_t top_k = 6;
    std::uniform_int_distribution<int32_t> expert(0, 383);
    std::vector<int32_t> experts(static_cast<std::size_t>(pairs));
    for (auto& e : experts) e = expert(rng);
    const DeviceBytes dexperts = to_device(experts);
    DeviceBytes scratch(moe_sort_scratch_bytes(pairs)), sorted_expert(pairs * 4), sorted_token(pairs * 4),
        sorted_pair(pairs * 8), position_of(pairs * 8);
    moe_sort(dexperts.at<int32_t>(), pairs, top_k, static_cast<void*>(scratch.at<std::byte>()), moe_sort_scratch_bytes(pairs),
             sorted_expert.at<int32_t>(), sorted_token.at<int32_t>(), sorted_pair.at<int64_t>(),
             position_of.at<int64_t>(), kDefaultStream);
    synchronize();
    std::vector<int64_t> want(static_cast<std::size_t>(pairs));
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int64_t a, int64_t b) { return experts[a] < experts[b]; });
    const auto got_pair = from_device(sorted_pair.at<int64_t>(), want.size());
    const auto got_expert = from_device(sorted_expert.at<int32_t>(), want.size());
    const auto got_token = from_device(sorted_token.at<int32_t>(), want.size());
    const auto got_position = from_device(position_of.at<int64_t>(), want.size());
    EXPECT_EQ(got_pair, want) << pairs << " pairs";
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got_expert[i], experts[want[i]]);
      EXPECT_EQ(got_token[i], want[i] / top_k);
      EXPECT_EQ(got_position[want[i]], static_cast<int64_t>(i));
    }
  }
}

}  // namespace
}  // namespace deepinfer::kernels::cuda

// The tensor-core linear (kernels/cuda/linear_mma.cu, through linear with a workspace) against the
// CPU's kernels::linear: FP8 with E8M0 block scales of V4.1's 32 x 32 and V4's 128 x 128, BF16,
// at token counts that fill none, one and several MMA column groups and token blocks, on
// matrices that split their columns into ranges and ones that do not; NaN codes; a row's bits
// alone and batched; a workspace too small is an Error; what it does not run goes to SIMT.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/error.h"
#include "cuda/cuda_test_support.h"
#include "cuda/kernel_test_support.h"
#include "kernels/cuda/cuda_kernels.h"

namespace deepinfer::kernels::cuda {
namespace {

using cuda_testing::DeviceBytes;
using cuda_testing::from_device;
using cuda_testing::synchronize;
using cuda_testing::to_device;
using namespace cuda_testing_weights;

constexpr Stream kDefaultStream = nullptr;

// A workspace with room for `tokens` tokens of `w`.
struct MmaWorkspace {
  DeviceBytes x_split, partials;
  LinearWorkspace workspace;
  MmaWorkspace(int64_t tokens, const WeightMatrix& w)
      : x_split(static_cast<std::size_t>(linear_mma_split_words(tokens, w)) * 4 + 16),
        partials(static_cast<std::size_t>(linear_mma_partial_floats(tokens, w)) * 4 + 16) {
    workspace.x_split = x_split.at<uint32_t>();
    workspace.x_split_words = linear_mma_split_words(tokens, w);
    workspace.partials = partials.at<float>();
    workspace.partial_floats = linear_mma_partial_floats(tokens, w);
  }
};

std::vector<float> gpu_linear_mma(const std::vector<float>& x, int64_t tokens, const WeightMatrix& device_weight) {
  const DeviceBytes dx = to_device(x);
  DeviceBytes dy(static_cast<std::size_t>(tokens * device_weight.rows) * sizeof(float) + 4);
  MmaWorkspace ws(tokens, device_weight);
  linear(dx.at<float>(), tokens, device_weight, dy.at<float>(), kDefaultStream, ws.workspace);
  synchronize();
  return from_device(dy.at<float>(), static_cast<std::size_t>(tokens * device_weight.rows));
}

struct Shape {
  WeightEncoding encoding;
  int64_t block_rows, block_cols, rows, cols;
};

const Shape kShapes[] = {
    {WeightEncoding::FP8_E4M3, 32, 32, 48, 384},      // V4.1 blocks; a half row block
    {WeightEncoding::FP8_E4M3, 128, 128, 1280, 512},  // V4 blocks; 10 row blocks: column ranges
    {WeightEncoding::FP8_E4M3, 32, 32, 16, 128},      // one tile, one chunk
    {WeightEncoding::BF16, 1, 1, 272, 256},           // the head's encoding
    // More rows than the wgmma kernel takes from 2 tokens: up to 8 tokens run linear_mma's one
    // group a warp with the next chunk's loads ahead (kLookahead), 9 and more the wgmma kernel.
    {WeightEncoding::FP8_E4M3, 32, 32, 8320, 512},
};

// Within 1e-5 sum |x w|, the SIMT kernel's bound: the f32 sum in another order (mma_common.cuh).
TEST(CudaLinearMma, MatchesCpu) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(17);
  for (const Shape& shape : kShapes) {
    const HostWeight w = make_weight(shape.encoding, shape.rows, shape.cols, rng, ScaleEncoding::E8M0,
                                     shape.block_rows, shape.block_cols);
    const HostWeight w_abs = absolute(w);
    const DeviceWeight d = upload(w);
    ASSERT_TRUE(linear_mma_supports(d.matrix));
    // 1 .. 64 tokens run two 8-token column groups a warp, more run four (groups_for).
    for (const int64_t tokens : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{17}, int64_t{40}, int64_t{100}}) {
      const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens * shape.cols), rng);
      std::vector<float> x_abs = x;
      for (auto& v : x_abs) v = std::fabs(v);
      const std::vector<float> want = cpu_linear(x, tokens, w.matrix);
      const std::vector<float> size = cpu_linear(x_abs, tokens, w_abs.matrix);
      const std::vector<float> got = gpu_linear_mma(x, tokens, d.matrix);
      int failures = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        const double bound = 1e-5 * static_cast<double>(size[i]) + 1e-30;
        if (!(std::fabs(got[i] - want[i]) <= bound) && failures++ < 5)
          ADD_FAILURE() << "encoding " << static_cast<int>(shape.encoding) << " " << shape.rows << " x " << shape.cols
                        << ", " << tokens << " tokens: [" << i << "] " << got[i] << " vs cpu " << want[i]
                        << " (bound " << bound << ")";
      }
    }
  }
}

TEST(CudaLinearMma, BatchInvariantBitForBit) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(23);
  for (const Shape& shape : kShapes) {
    const HostWeight w = make_weight(shape.encoding, shape.rows, shape.cols, rng, ScaleEncoding::E8M0,
                                     shape.block_rows, shape.block_cols);
    const DeviceWeight d = upload(w);
    // 37 tokens run two column groups a warp and 100 four; on Hopper the wgmma kernel
    // (sm90/linear_wgmma.cu) runs these matrices from 2 tokens, in blocks of 16 tokens (3, 9), 32
    // (31, 37) and 64 (100, and 130 ending in a partial block), while a token alone runs
    // linear_mma's: a row's bits are the same in every one of them.
    for (const int64_t tokens : {int64_t{3}, int64_t{9}, int64_t{31}, int64_t{37}, int64_t{100}, int64_t{130}}) {
      const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens * shape.cols), rng, 2.0f);
      const std::vector<float> batched = gpu_linear_mma(x, tokens, d.matrix);
      for (const int64_t t : {int64_t{0}, int64_t{5}, int64_t{18}, int64_t{30}, tokens - 1}) {
        if (t >= tokens) continue;
        const std::vector<float> row(x.begin() + t * shape.cols, x.begin() + (t + 1) * shape.cols);
        const std::vector<float> alone = gpu_linear_mma(row, 1, d.matrix);
        const std::vector<float> in_batch(batched.begin() + t * shape.rows, batched.begin() + (t + 1) * shape.rows);
        EXPECT_TRUE(same_bits(alone, in_batch))
            << "encoding " << static_cast<int>(shape.encoding) << " token " << t << " of " << tokens;
      }
    }
  }
}

// Calls of at most 8 tokens split x in their blocks, into shared memory, where a block's range
// fits 48 KiB (linear_mma.cu, SplitInShared), and take split_rows' launch otherwise: the same words,
// so the same bits, in both encodings. 33,792 rows make one range of 10 chunks: 6 tokens fit, 7 do
// not (on Hopper the wgmma kernel takes matrices of this many rows from 8 tokens).
TEST(CudaLinearMma, SmallCallsGiveTheSameBitsWhereverXIsSplit) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(31);
  for (const WeightEncoding encoding : {WeightEncoding::FP8_E4M3, WeightEncoding::BF16}) {
    const HostWeight w = make_weight(encoding, 33792, 1280, rng, ScaleEncoding::E8M0, 32, 32);
    const DeviceWeight d = upload(w);
    ASSERT_EQ(linear_mma_partial_floats(1, d.matrix), 0) << "the shape must make one column range";
    for (const int64_t tokens : {int64_t{6}, int64_t{7}}) {
      const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens * 1280), rng, 2.0f);
      const std::vector<float> batched = gpu_linear_mma(x, tokens, d.matrix);
      for (int64_t t = 0; t < tokens; t += 3) {
        const std::vector<float> row(x.begin() + t * 1280, x.begin() + (t + 1) * 1280);
        EXPECT_TRUE(same_bits(gpu_linear_mma(row, 1, d.matrix),
                              std::vector<float>(batched.begin() + t * 33792, batched.begin() + (t + 1) * 33792)))
            << "encoding " << static_cast<int>(encoding) << ", token " << t << " of " << tokens;
      }
    }
  }
}

// A call that splits its columns adds the ranges either in its last blocks (with tile counters) or
// in a launch of its own: the same sum in the same order, so the same bits; and each call leaves
// the counters zero for the next (run several times in a row, at token counts with one and with
// several token blocks).
TEST(CudaLinearMma, TheRangeSumInTheKernelGivesTheSeparateLaunchsBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(29);
  const HostWeight w = make_weight(WeightEncoding::FP8_E4M3, 1280, 512, rng, ScaleEncoding::E8M0, 128, 128);
  const DeviceWeight d = upload(w);
  ASSERT_GT(linear_mma_partial_floats(1, d.matrix), 0) << "the shape must split its columns";
  DeviceBytes counters(static_cast<std::size_t>(kLinearMmaTileCounters) * sizeof(uint32_t));
  ASSERT_EQ(cudaMemset(counters.at<uint32_t>(), 0, counters.size()), cudaSuccess);
  for (int round = 0; round < 3; ++round)
    for (const int64_t tokens : {int64_t{1}, int64_t{9}, int64_t{70}}) {
      const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens * w.matrix.cols), rng);
      const std::vector<float> separate = gpu_linear_mma(x, tokens, d.matrix);
      const DeviceBytes dx = to_device(x);
      DeviceBytes dy(static_cast<std::size_t>(tokens * w.matrix.rows) * sizeof(float));
      MmaWorkspace ws(tokens, d.matrix);
      ws.workspace.tile_counters = counters.at<uint32_t>();
      linear(dx.at<float>(), tokens, d.matrix, dy.at<float>(), kDefaultStream, ws.workspace);
      synchronize();
      EXPECT_TRUE(same_bits(from_device(dy.at<float>(), separate.size()), separate))
          << tokens << " tokens, round " << round;
      const std::vector<uint32_t> left = from_device(counters.at<uint32_t>(), 64);
      for (const uint32_t c : left) ASSERT_EQ(c, 0u) << "a counter left set after " << tokens << " tokens";
    }
}

// Group g of a grouped projection (wo_a): slice g of each row of x through group g's weight, into
// slice g of each row of y; the other slices of y untouched.
TEST(CudaLinearMma, StridedRowsForGroupedProjections) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(41);
  constexpr int64_t kGroups = 3, kTokens = 6, kIn = 256, kOut = 48;
  for (const WeightEncoding encoding : {WeightEncoding::FP8_E4M3, WeightEncoding::BF16}) {
    std::vector<HostWeight> host;
    std::vector<DeviceWeight> device;
    for (int64_t g = 0; g < kGroups; ++g) {
      host.push_back(make_weight(encoding, kOut, kIn, rng, ScaleEncoding::E8M0, 32, 32));
      device.push_back(upload(host.back()));
    }
    const std::vector<float> x = random_floats(static_cast<std::size_t>(kTokens * kGroups * kIn), rng);
    const DeviceBytes dx = to_device(x);
    const std::vector<float> sentinel(static_cast<std::size_t>(kTokens * kGroups * kOut), 1234.5f);
    const DeviceBytes dy = to_device(sentinel);
    for (int64_t g = 0; g < kGroups; g += 2) {  // groups 0 and 2: group 1's slices stay
      MmaWorkspace ws(kTokens, device[g].matrix);
      linear_mma(dx.at<float>() + g * kIn, kGroups * kIn, kTokens, device[g].matrix, dy.at<float>() + g * kOut,
                 kGroups * kOut, ws.workspace.x_split, ws.workspace.partials, kDefaultStream);
      synchronize();
    }
    const std::vector<float> y = from_device(dy.at<float>(), sentinel.size());
    for (int64_t g = 0; g < kGroups; ++g)
      for (int64_t t = 0; t < kTokens; ++t) {
        const std::vector<float> row(x.begin() + (t * kGroups + g) * kIn, x.begin() + (t * kGroups + g + 1) * kIn);
        const std::vector<float> got(y.begin() + (t * kGroups + g) * kOut, y.begin() + (t * kGroups + g + 1) * kOut);
        if (g == 1) {
          EXPECT_EQ(got, std::vector<float>(kOut, 1234.5f)) << "token " << t;
          continue;
        }
        EXPECT_TRUE(same_bits(got, gpu_linear_mma(row, 1, device[g].matrix)))
            << "encoding " << static_cast<int>(encoding) << " group " << g << " token " << t;
      }
  }
}

// linear_mma_grouped over the groups `descriptors` (device weights of one shape): x rows of all
// groups' columns in, y rows of all groups' outputs back.
std::vector<float> gpu_linear_mma_grouped(const std::vector<float>& x, int64_t tokens,
                                          const std::vector<WeightMatrix>& descriptors) {
  const auto groups = static_cast<int64_t>(descriptors.size());
  const WeightMatrix& group = descriptors.front();
  const DeviceBytes descriptor_array = to_device(descriptors);
  const DeviceBytes dx = to_device(x);
  DeviceBytes dy(static_cast<std::size_t>(tokens * groups * group.rows) * sizeof(float));
  DeviceBytes split(static_cast<std::size_t>(linear_mma_grouped_split_words(tokens, group, groups)) * 4 + 16);
  DeviceBytes partials(static_cast<std::size_t>(linear_mma_grouped_partial_floats(tokens, group, groups)) * 4 + 16);
  linear_mma_grouped(dx.at<float>(), groups * group.cols, tokens, group, descriptor_array.at<WeightMatrix>(), groups,
                     dy.at<float>(), groups * group.rows, split.at<uint32_t>(), partials.at<float>(), kDefaultStream);
  synchronize();
  return from_device(dy.at<float>(), static_cast<std::size_t>(tokens * groups * group.rows));
}

// A grouped projection in one launch (linear_mma_grouped): group g's weight (each in its own
// allocation, as the weight store holds wo_a's groups) through slice g of each row of x, into
// slice g of each row of y. Against the CPU group by group (the f32 bound of MatchesCpu), a row's
// bits alone and in a batch (37 and 100 tokens: two and four column groups), NaN codes in one
// group only, and the shapes it refuses.
TEST(CudaLinearMma, GroupedProjectionInOneLaunch) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(43);
  struct Case { WeightEncoding encoding; int64_t groups, rows, cols, block; };
  for (const Case& c : {Case{WeightEncoding::FP8_E4M3, 8, 64, 256, 32}, Case{WeightEncoding::FP8_E4M3, 3, 128, 512, 128},
                        Case{WeightEncoding::BF16, 4, 32, 128, 1}}) {
    std::vector<HostWeight> host;
    std::vector<DeviceWeight> device;
    std::vector<WeightMatrix> descriptors;
    for (int64_t g = 0; g < c.groups; ++g) {
      host.push_back(make_weight(c.encoding, c.rows, c.cols, rng, ScaleEncoding::E8M0, c.block, c.block));
      device.push_back(upload(host.back()));
      descriptors.push_back(device.back().matrix);
    }
    const int64_t width = c.groups * c.cols, out = c.groups * c.rows;
    const std::string what = "encoding " + std::to_string(static_cast<int>(c.encoding)) + ", " +
                             std::to_string(c.groups) + " groups of " + std::to_string(c.rows) + " x " + std::to_string(c.cols);
    ASSERT_TRUE(linear_mma_grouped_supports(descriptors[0])) << what;
    for (const int64_t tokens : {int64_t{37}, int64_t{100}}) {
      const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens * width), rng);
      const std::vector<float> batched = gpu_linear_mma_grouped(x, tokens, descriptors);
      int failures = 0;
      for (int64_t g = 0; g < c.groups; ++g) {
        std::vector<float> slice, slice_abs;
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t k = 0; k < c.cols; ++k) {
            slice.push_back(x[static_cast<std::size_t>(t * width + g * c.cols + k)]);
            slice_abs.push_back(std::fabs(slice.back()));
          }
        const std::vector<float> want = cpu_linear(slice, tokens, host[g].matrix);
        const std::vector<float> size = cpu_linear(slice_abs, tokens, absolute(host[g]).matrix);
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t r = 0; r < c.rows; ++r) {
            const auto i = static_cast<std::size_t>(t * c.rows + r);
            const float got = batched[static_cast<std::size_t>(t * out + g * c.rows + r)];
            const double bound = 1e-5 * static_cast<double>(size[i]) + 1e-30;
            if (!(std::fabs(got - want[i]) <= bound) && failures++ < 5)
              ADD_FAILURE() << what << ", group " << g << ", token " << t << ", row " << r << ": " << got << " vs cpu "
                            << want[i];
          }
      }
      for (const int64_t t : {int64_t{0}, int64_t{17}, tokens - 1}) {
        const std::vector<float> row(x.begin() + t * width, x.begin() + (t + 1) * width);
        const std::vector<float> alone = gpu_linear_mma_grouped(row, 1, descriptors);
        EXPECT_TRUE(same_bits(alone, std::vector<float>(batched.begin() + t * out, batched.begin() + (t + 1) * out)))
            << what << ": token " << t << " of " << tokens;
      }
    }
  }
  // NaN codes in one group's weight make that group's outputs NaN, and only them.
  std::vector<HostWeight> host;
  std::vector<DeviceWeight> device;
  std::vector<WeightMatrix> descriptors;
  for (int64_t g = 0; g < 2; ++g) {
    host.push_back(make_weight(WeightEncoding::FP8_E4M3, 32, 128, rng, ScaleEncoding::E8M0, 32, 32));
    if (g == 1) host.back().data[5 * 128 + 9] = 0x7F;
    host.back().matrix.data = host.back().data.data();
    device.push_back(upload(host.back()));
    descriptors.push_back(device.back().matrix);
  }
  const std::vector<float> y = gpu_linear_mma_grouped(random_floats(2 * 256, rng), 2, descriptors);
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t r = 0; r < 64; ++r)
      EXPECT_EQ(std::isnan(y[static_cast<std::size_t>(t * 64 + r)]), r == 32 + 5) << "token " << t << " row " << r;
  // Groups of 16 rows would split a warp's 32 rows between two groups.
  EXPECT_FALSE(linear_mma_grouped_supports(make_weight(WeightEncoding::BF16, 16, 128, rng, ScaleEncoding::E8M0, 1, 1).matrix));
  EXPECT_THROW(linear_mma_grouped(nullptr, 256, 2, descriptors[0], nullptr, 2, nullptr, 64, nullptr, nullptr,
                                  kDefaultStream),
               Error);
}

TEST(CudaLinearMma, NanCodesGiveNan) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(29);
  HostWeight w = make_weight(WeightEncoding::FP8_E4M3, 32, 256, rng, ScaleEncoding::E8M0, 32, 32);
  w.data[3 * 256 + 77] = 0x7F;   // row 3
  w.data[20 * 256 + 130] = 0xFF;  // row 20
  w.matrix.data = w.data.data();
  const DeviceWeight d = upload(w);
  for (const int64_t tokens : {int64_t{1}, int64_t{2}}) {  // one: a small call (on Hopper, two: wgmma)
    const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens * 256), rng);
    const std::vector<float> got = gpu_linear_mma(x, tokens, d.matrix);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < 32; ++r)
        EXPECT_EQ(std::isnan(got[static_cast<std::size_t>(t * 32 + r)]), r == 3 || r == 20)
            << tokens << " tokens: token " << t << " row " << r;
  }
}

// A matrix checked free of NaN codes (WeightMatrix::no_nan_codes, as the weight store sets it) is
// decoded without the NaN test: the same bits as with it, in both block layouts and at token
// counts that take two and four column groups.
TEST(CudaLinearMma, NanFreeDecodeGivesTheSameBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(41);
  for (const int64_t block : {32, 128}) {
    HostWeight w = make_weight(WeightEncoding::FP8_E4M3, 256, 512, rng, ScaleEncoding::E8M0, block, block);
    for (uint8_t& code : w.data)
      if ((code & 0x7F) == 0x7F) code ^= 0x01;
    w.matrix.data = w.data.data();
    DeviceWeight d = upload(w);
    ASSERT_FALSE(has_e4m3_nan(static_cast<const uint8_t*>(d.matrix.data), 256 * 512, kDefaultStream));
    for (const int64_t tokens : {1, 9, 40, 70}) {
      const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens * 512), rng);
      d.matrix.no_nan_codes = false;
      const std::vector<float> checked = gpu_linear_mma(x, tokens, d.matrix);
      d.matrix.no_nan_codes = true;
      EXPECT_TRUE(same_bits(checked, gpu_linear_mma(x, tokens, d.matrix))) << "block " << block << ", " << tokens << " tokens";
    }
  }
}

// Scales at most 2^7 (kMaxFoldedE4m3Scale = 134, every released checkpoint's): the decode folds
// its unit and the scale into one multiply, with the same bits, the smallest and largest such
// scale and the e4m3 subnormal codes included.
TEST(CudaLinearMma, FoldedScalesGiveTheSameBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(43);
  for (const int64_t block : {32, 128}) {
    HostWeight w = make_weight(WeightEncoding::FP8_E4M3, 256, 512, rng, ScaleEncoding::E8M0, block, block);
    w.scales[0] = 0;
    w.scales[1] = 134;
    w.data[3] = 0x01;  // the smallest subnormal code, in the tile of scale 0
    w.data[5] = 0x86;
    DeviceWeight d = upload(w);
    d.matrix.no_nan_codes = true;
    for (const int64_t tokens : {1, 9, 70}) {
      const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens * 512), rng);
      d.matrix.max_e8m0 = 255;
      const std::vector<float> two_steps = gpu_linear_mma(x, tokens, d.matrix);
      d.matrix.max_e8m0 = 134;
      EXPECT_TRUE(same_bits(two_steps, gpu_linear_mma(x, tokens, d.matrix))) << "block " << block << ", " << tokens << " tokens";
    }
  }
}

TEST(CudaHasE4m3Nan, FindsOneCodeAnywhere) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(43);
  std::vector<uint8_t> codes(1000);
  for (uint8_t& c : codes) {
    c = static_cast<uint8_t>(rng());
    if ((c & 0x7F) == 0x7F) c ^= 0x01;
  }
  for (const std::size_t misalign : {0, 3}) {
    const DeviceBytes clean = to_device(codes, misalign);
    EXPECT_FALSE(has_e4m3_nan(clean.at<uint8_t>(misalign), 1000, kDefaultStream)) << "misalign " << misalign;
    for (const std::size_t at : {0, 15, 16, 517, 999})
      for (const uint8_t nan : {0x7F, 0xFF}) {
        std::vector<uint8_t> with = codes;
        with[at] = nan;
        const DeviceBytes dirty = to_device(with, misalign);
        EXPECT_TRUE(has_e4m3_nan(dirty.at<uint8_t>(misalign), 1000, kDefaultStream))
            << "misalign " << misalign << ", code " << int{nan} << " at " << at;
      }
  }
  EXPECT_FALSE(has_e4m3_nan(nullptr, 0, kDefaultStream));
}

TEST(CudaLinearMma, ShortWorkspaceIsAnError) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(31);
  const HostWeight w = make_weight(WeightEncoding::BF16, 64, 256, rng);
  const DeviceWeight d = upload(w);
  const DeviceBytes dx = to_device(random_floats(100 * 256, rng));
  DeviceBytes dy(100 * 64 * 4);
  MmaWorkspace ws(2, d.matrix);  // room for 2 tokens (as many kernels pad them: 64), not 100
  EXPECT_THROW(linear(dx.at<float>(), 100, d.matrix, dy.at<float>(), kDefaultStream, ws.workspace), Error);
}

TEST(CudaLinearMma, SupportsTheReleasedDenseEncodingsOnly) {
  std::mt19937 rng(37);
  const auto aligned = [](WeightMatrix m) {
    m.data = reinterpret_cast<const void*>(uintptr_t{1} << 20);
    return m;
  };
  EXPECT_TRUE(linear_mma_supports(aligned(make_weight(WeightEncoding::FP8_E4M3, 32, 256, rng, ScaleEncoding::E8M0, 128, 128).matrix)));
  EXPECT_TRUE(linear_mma_supports(aligned(make_weight(WeightEncoding::BF16, 32, 256, rng).matrix)));
  EXPECT_FALSE(linear_mma_supports(aligned(make_weight(WeightEncoding::FP8_E4M3, 32, 256, rng, ScaleEncoding::F32, 128, 128).matrix)));
  EXPECT_FALSE(linear_mma_supports(aligned(make_weight(WeightEncoding::FP8_E4M3, 32, 256, rng, ScaleEncoding::E8M0, 16, 16).matrix)));
  EXPECT_FALSE(linear_mma_supports(aligned(make_weight(WeightEncoding::F32, 32, 256, rng).matrix)));
  EXPECT_FALSE(linear_mma_supports(aligned(make_weight(WeightEncoding::BF16, 24, 256, rng).matrix)));   // mHC fn's 24 rows
  EXPECT_FALSE(linear_mma_supports(aligned(make_weight(WeightEncoding::BF16, 32, 200, rng).matrix)));
  WeightMatrix misaligned = aligned(make_weight(WeightEncoding::BF16, 32, 256, rng).matrix);
  misaligned.data = static_cast<const uint8_t*>(misaligned.data) + 2;
  EXPECT_FALSE(linear_mma_supports(misaligned));
}

}  // namespace
}  // namespace deepinfer::kernels::cuda

// The tensor-core expert kernels (kernels/cuda/expert_mma.cu) against the CPU: expert_tiles cuts
// each expert's sorted run into tiles of at most kExpertTilePairs; expert_gate_up gives the
// clamped SwiGLU of the CPU's w1 x and w3 x within the split's bound; expert_down gives the CPU's
// w2 h of the h it was given within f32 rounding; a pair's result has the same bits whatever
// shares its tile; tile_expert_codes places every bit where the layout says; and the
// descriptors the kernels cannot run are told apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
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

float silu(float x) { return x / (1.0f + std::exp(-x)); }

float swiglu(float g, float u, float limit) {
  if (limit > 0) {
    g = std::fmin(g, limit);
    u = std::clamp(u, -limit, limit);
  }
  return silu(g) * u;
}

// A BF16 bit pattern's value.
float bf16_float(uint16_t bits) {
  const uint32_t word = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &word, 4);
  return value;
}

// Column c of a split row read back (hi + mid + lo, in that order): the kernels' documented
// operand order.
float split_value_at(const std::vector<uint16_t>& halves, int64_t row, int64_t cols, int64_t c) {
  const int64_t segment = c / 32;
  const int64_t within = c % 32;
  const int64_t word = 4 * (within / 8) + (within % 8) % 4;
  const int64_t half = (within % 8) / 4;
  const int64_t at = (segment * 16 + word) * 2 + half;
  float value = 0.0f;
  for (int64_t plane = 0; plane < 3; ++plane) value += bf16_float(halves[static_cast<std::size_t>((3 * row + plane) * cols + at)]);
  return value;
}

struct Experts {
  std::vector<HostWeight> w1, w2, w3, w1_abs, w3_abs;
  std::vector<DeviceWeight> device;  // w1, w2, w3 of expert 0, then of 1, ...
  DeviceBytes w1_array, w2_array, w3_array;
};

// The device copy in the layout the CUDA weight store gives routed experts (ExpertTiles).
DeviceWeight upload_expert(const HostWeight& w) {
  DeviceWeight d = upload(w);
  DeviceBytes tiled(w.data.size());
  tile_expert_codes(d.data.at<uint8_t>(), tiled.at<uint8_t>(), w.matrix.rows, w.matrix.cols / 2, kDefaultStream);
  synchronize();
  d.data = std::move(tiled);
  d.matrix.data = d.data.at<uint8_t>();
  d.matrix.layout = WeightLayout::ExpertTiles;
  return d;
}

// `adjust` (when given) changes each host weight before its upload (its scales, say).
Experts make_experts(int count, int64_t inner, int64_t hidden, std::mt19937& rng,
                     const std::function<void(HostWeight&)>& adjust = {}) {
  Experts e;
  std::vector<WeightMatrix> d1, d2, d3;
  const auto made = [&](int64_t rows, int64_t cols) {
    HostWeight w = make_weight(WeightEncoding::FP4_E2M1, rows, cols, rng, ScaleEncoding::E8M0, 1, 32);
    if (adjust) adjust(w);
    return w;
  };
  for (int i = 0; i < count; ++i) {
    e.w1.push_back(made(inner, hidden));
    e.w2.push_back(made(hidden, inner));
    e.w3.push_back(made(inner, hidden));
    e.w1_abs.push_back(absolute(e.w1.back()));
    e.w3_abs.push_back(absolute(e.w3.back()));
    e.device.push_back(upload_expert(e.w1.back()));
    d1.push_back(e.device.back().matrix);
    e.device.push_back(upload_expert(e.w2.back()));
    d2.push_back(e.device.back().matrix);
    e.device.push_back(upload_expert(e.w3.back()));
    d3.push_back(e.device.back().matrix);
  }
  e.w1_array = to_device(d1);
  e.w2_array = to_device(d2);
  e.w3_array = to_device(d3);
  return e;
}

// One MoE call through the kernels, as the backend makes it: sort, tiles, split, gate-up, down.
struct ExpertRun {
  std::vector<int64_t> sorted_pair;      // position -> pair
  std::vector<uint16_t> h;               // split h, [pairs][3][inner] halves
  std::vector<float> y;                  // [pairs (sorted), hidden]
};

// What both runners do before the expert kernels: x and the routing on the device, the pairs sorted
// by expert (moe_sort), cut into tiles of tile_pairs (expert_tiles), and the pair scales in sorted
// order (none without pair_scale).
struct SortedCall {
  int64_t pairs, bound;
  DeviceBytes dchoice, dx, scratch, sorted_expert, sorted_token, sorted_pair, position_of, tiles, tile_count, dscale;
  std::vector<int64_t> sorted_pair_host;
  SortedCall(const std::vector<float>& x, int experts, int64_t top_k, const std::vector<int32_t>& choice,
             const std::vector<float>* pair_scale, int tile_pairs)
      : pairs(static_cast<int64_t>(choice.size())),
        bound(expert_tile_bound(pairs, experts, tile_pairs)),
        dchoice(to_device(choice)),
        dx(to_device(x)),
        scratch(moe_sort_scratch_bytes(pairs)),
        sorted_expert(pairs * 4),
        sorted_token(pairs * 4),
        sorted_pair(pairs * 8),
        position_of(pairs * 8),
        tiles(static_cast<std::size_t>(bound) * 16 + 16),
        tile_count(4) {
    moe_sort(dchoice.at<int32_t>(), pairs, top_k, scratch.get(), moe_sort_scratch_bytes(pairs),
             sorted_expert.at<int32_t>(), sorted_token.at<int32_t>(), sorted_pair.at<int64_t>(),
             position_of.at<int64_t>(), kDefaultStream);
    sorted_pair_host = from_device(sorted_pair.at<int64_t>(), static_cast<std::size_t>(pairs));
    if (pair_scale) {
      std::vector<float> sorted_scale;
      for (const int64_t p : sorted_pair_host) sorted_scale.push_back((*pair_scale)[static_cast<std::size_t>(p)]);
      dscale = to_device(sorted_scale);
    }
    expert_tiles(sorted_expert.at<int32_t>(), pairs, tiles.at<int32_t>(), tile_count.at<int32_t>(), kDefaultStream,
                 tile_pairs);
  }
  const float* scales() const { return dscale.size() > 0 ? dscale.at<float>() : nullptr; }
};

ExpertRun run_experts(const Experts& e, int experts, const std::vector<float>& x, int64_t tokens, int64_t top_k,
                const std::vector<int32_t>& choice, int64_t inner, int64_t hidden, float limit,
                const std::vector<float>* pair_scale, int max_e8m0 = 255, int tile_pairs = kExpertTilePairs,
                ExpertGrid grid = ExpertGrid::kAuto) {
  const SortedCall call(x, experts, top_k, choice, pair_scale, tile_pairs);
  const int64_t pairs = call.pairs;
  DeviceBytes x_split(static_cast<std::size_t>(split_words(tokens, hidden)) * 4),
      h_split(static_cast<std::size_t>(split_words(pairs, inner)) * 4), y(static_cast<std::size_t>(pairs * hidden) * 4);
  ExpertRun run;
  run.sorted_pair = call.sorted_pair_host;
  split_rows(call.dx.at<float>(), tokens, hidden, hidden, x_split.at<uint32_t>(), kDefaultStream);
  expert_gate_up(x_split.at<uint32_t>(), call.sorted_token.at<int32_t>(), pairs, call.tiles.at<int32_t>(),
                 call.tile_count.at<int32_t>(), call.bound, e.w1_array.at<WeightMatrix>(),
                 e.w3_array.at<WeightMatrix>(), inner, hidden, limit, call.scales(), h_split.at<uint32_t>(),
                 kDefaultStream, max_e8m0, tile_pairs, grid);
  expert_down(h_split.at<uint32_t>(), pairs, call.tiles.at<int32_t>(), call.tile_count.at<int32_t>(), call.bound,
              e.w2_array.at<WeightMatrix>(), hidden, inner, y.at<float>(), kDefaultStream, max_e8m0, tile_pairs, grid);
  synchronize();
  run.h = from_device(reinterpret_cast<const uint16_t*>(h_split.at<uint32_t>()),
                      static_cast<std::size_t>(2 * split_words(pairs, inner)));
  run.y = from_device(y.at<float>(), static_cast<std::size_t>(pairs * hidden));
  return run;
}

// Scales no larger than 2^1 (every released checkpoint's): the decode folds its unit and the
// scale into one multiply, and h and y keep their bits, the smallest and largest such scale
// included.
TEST(CudaExpertMma, FoldedScalesGiveTheSameBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(29);
  constexpr int kExperts = 4;
  constexpr int64_t kTokens = 9, kTopK = 2, kInner = 256, kHidden = 384;
  int which = 0;
  const Experts e = make_experts(kExperts, kInner, kHidden, rng, [&](HostWeight& w) {
    for (auto& s : w.scales) s = static_cast<uint8_t>(std::min<int>(s, 128));
    w.scales[0] = 0;
    w.scales[static_cast<std::size_t>(1 + which++ % 7)] = 128;
  });
  const std::vector<float> x = random_floats(static_cast<std::size_t>(kTokens * kHidden), rng);
  std::vector<int32_t> choice;
  for (int64_t t = 0; t < kTokens; ++t) choice.insert(choice.end(), {static_cast<int32_t>(t % kExperts), static_cast<int32_t>((t + 1) % kExperts)});
  const ExpertRun two_steps = run_experts(e, kExperts, x, kTokens, kTopK, choice, kInner, kHidden, 7.0f, nullptr, 255);
  const ExpertRun folded = run_experts(e, kExperts, x, kTokens, kTopK, choice, kInner, kHidden, 7.0f, nullptr, 128);
  ASSERT_EQ(folded.h.size(), two_steps.h.size());
  EXPECT_EQ(std::memcmp(folded.h.data(), two_steps.h.data(), folded.h.size() * 2), 0);
  ASSERT_EQ(folded.y.size(), two_steps.y.size());
  EXPECT_EQ(std::memcmp(folded.y.data(), two_steps.y.data(), folded.y.size() * 4), 0);
  bool nonzero = false;
  for (const float v : folded.y) nonzero |= v != 0.0f;
  EXPECT_TRUE(nonzero);
}

TEST(CudaExpertMma, TilesCutEachExpertsRun) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(3);
  for (const int capacity : {kExpertTilePairs, kExpertWideTilePairs})
  for (const int64_t pairs : {int64_t{1}, int64_t{6}, int64_t{37}, int64_t{1500}, int64_t{3072}}) {
    std::uniform_int_distribution<int32_t> pick(-1, 40);
    std::vector<int32_t> sorted(static_cast<std::size_t>(pairs));
    for (auto& v : sorted) v = pick(rng);
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> want;
    for (int64_t i = 0; i < pairs;) {
      int64_t end = i;
      while (end < pairs && sorted[end] == sorted[i]) ++end;
      for (int64_t first = i; first < end; first += capacity)
        want.insert(want.end(), {sorted[i], static_cast<int32_t>(first),
                                 static_cast<int32_t>(std::min<int64_t>(capacity, end - first)), 0});
      i = end;
    }
    const int64_t bound = expert_tile_bound(pairs, 41, capacity);
    ASSERT_LE(static_cast<int64_t>(want.size() / 4), bound) << pairs << " pairs";
    const DeviceBytes dsorted = to_device(sorted);
    DeviceBytes tiles(static_cast<std::size_t>(bound) * 16), count(4);
    expert_tiles(dsorted.at<int32_t>(), pairs, tiles.at<int32_t>(), count.at<int32_t>(), kDefaultStream, capacity);
    synchronize();
    const int32_t got_count = from_device(count.at<int32_t>(), 1)[0];
    ASSERT_EQ(got_count, static_cast<int32_t>(want.size() / 4)) << pairs << " pairs, capacity " << capacity;
    std::vector<int32_t> got = from_device(tiles.at<int32_t>(), want.size());
    for (std::size_t i = 3; i < got.size(); i += 4) got[i] = 0;  // the unused word
    EXPECT_EQ(got, want) << pairs << " pairs, capacity " << capacity;
  }
  EXPECT_EQ(expert_tile_pairs(256 * 6, 384), kExpertTilePairs);
  EXPECT_EQ(expert_tile_pairs(512 * 6, 384), kExpertWideTilePairs);
  EXPECT_THROW(expert_tile_bound(10, 4, 5), Error);
}

// The one-launch sort and tiling of decode-sized calls gives moe_sort's and expert_tiles'
// results: random expert ids with repeats and the negative "no expert" id, up to its 1024 pairs,
// and it declines more; the pairs' weights it sorts are gather_rows' by the sorted pairs.
TEST(CudaExpertMma, SortAndTilesInOneLaunchGiveTheSameResults) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(4);
  for (const int capacity : {kExpertTilePairs, kExpertWideTilePairs, 16, 32})
    for (const int64_t pairs : {int64_t{1}, int64_t{6}, int64_t{384}, int64_t{1000}, int64_t{1024}}) {
      constexpr int64_t kTopK = 6;
      constexpr int kExperts = 384;
      std::uniform_int_distribution<int32_t> pick(-1, pairs < 100 ? 3 : kExperts - 1);
      std::vector<int32_t> choice(static_cast<std::size_t>(pairs));
      for (auto& v : choice) v = pick(rng);
      const int64_t bound = expert_tile_bound(pairs, kExperts + 1, capacity);
      const std::vector<float> pair_weights = random_floats(static_cast<std::size_t>(pairs), rng);
      const DeviceBytes dchoice = to_device(choice), dweights = to_device(pair_weights);
      DeviceBytes scratch(moe_sort_scratch_bytes(pairs));
      struct Out {
        explicit Out(int64_t n, int64_t tile_bound)
            : expert(n * 4), token(n * 4), pair(n * 8), position(n * 8), tiles(tile_bound * 16), count(4),
              weight(n * 4) {}
        DeviceBytes expert, token, pair, position, tiles, count, weight;
      } two(pairs, bound), one(pairs, bound);
      moe_sort(dchoice.at<int32_t>(), pairs, kTopK, scratch.get(), moe_sort_scratch_bytes(pairs),
               two.expert.at<int32_t>(), two.token.at<int32_t>(), two.pair.at<int64_t>(), two.position.at<int64_t>(),
               kDefaultStream);
      expert_tiles(two.expert.at<int32_t>(), pairs, two.tiles.at<int32_t>(), two.count.at<int32_t>(), kDefaultStream,
                   capacity);
      gather_rows(dweights.at<float>(), two.pair.at<int64_t>(), pairs, 1, two.weight.at<float>(), kDefaultStream);
      ASSERT_TRUE(moe_sort_tiles(dchoice.at<int32_t>(), pairs, kTopK, one.expert.at<int32_t>(), one.token.at<int32_t>(),
                                 one.pair.at<int64_t>(), one.position.at<int64_t>(), one.tiles.at<int32_t>(),
                                 one.count.at<int32_t>(), kDefaultStream, capacity, dweights.at<float>(),
                                 one.weight.at<float>()));
      synchronize();
      const auto n = static_cast<std::size_t>(pairs);
      const std::string where = std::to_string(pairs) + " pairs, capacity " + std::to_string(capacity);
      EXPECT_EQ(from_device(one.expert.at<int32_t>(), n), from_device(two.expert.at<int32_t>(), n)) << where;
      EXPECT_EQ(from_device(one.token.at<int32_t>(), n), from_device(two.token.at<int32_t>(), n)) << where;
      EXPECT_EQ(from_device(one.pair.at<int64_t>(), n), from_device(two.pair.at<int64_t>(), n)) << where;
      EXPECT_EQ(from_device(one.position.at<int64_t>(), n), from_device(two.position.at<int64_t>(), n)) << where;
      EXPECT_EQ(from_device(one.weight.at<float>(), n), from_device(two.weight.at<float>(), n)) << where;
      const int32_t count = from_device(two.count.at<int32_t>(), 1)[0];
      ASSERT_EQ(from_device(one.count.at<int32_t>(), 1)[0], count) << where;
      std::vector<int32_t> got = from_device(one.tiles.at<int32_t>(), static_cast<std::size_t>(count) * 4);
      std::vector<int32_t> want = from_device(two.tiles.at<int32_t>(), static_cast<std::size_t>(count) * 4);
      for (std::size_t i = 3; i < got.size(); i += 4) got[i] = want[i] = 0;  // the unused word
      EXPECT_EQ(got, want) << where;
    }
  EXPECT_FALSE(moe_sort_tiles(nullptr, 1025, 6, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, kDefaultStream));
}

// Wide tiles (up to 8 pairs, one to four MMA groups) give every pair the bits 4-pair tiles give
// it: experts with 1 to 11 pairs, so tiles of every group count, with and without pair scales.
TEST(CudaExpertMma, WideTilesGiveTheSameBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(31);
  constexpr int kExperts = 8;
  constexpr int64_t kTokens = 33, kTopK = 2, kInner = 256, kHidden = 384;
  const Experts e = make_experts(kExperts, kInner, kHidden, rng);
  const std::vector<float> x = random_floats(static_cast<std::size_t>(kTokens * kHidden), rng);
  // Expert e takes about e + 1 pairs (expert 7 the rest), one slot skipped.
  std::vector<int32_t> choice;
  for (int32_t expert = 0; expert < kExperts; ++expert)
    for (int32_t n = 0; n <= expert && static_cast<int64_t>(choice.size()) < kTokens * kTopK; ++n) choice.push_back(expert);
  while (static_cast<int64_t>(choice.size()) < kTokens * kTopK) choice.push_back(7);
  choice[5] = -1;
  std::shuffle(choice.begin(), choice.end(), rng);
  std::vector<float> pair_scale(choice.size());
  std::uniform_real_distribution<float> weight(0.1f, 1.5f);
  for (auto& s : pair_scale) s = weight(rng);
  const std::vector<float>* const no_scales = nullptr;
  for (const std::vector<float>* scales : {no_scales, static_cast<const std::vector<float>*>(&pair_scale)}) {
    const ExpertRun narrow = run_experts(e, kExperts, x, kTokens, kTopK, choice, kInner, kHidden, 7.0f, scales, 255,
                                         kExpertTilePairs);
    const ExpertRun wide = run_experts(e, kExperts, x, kTokens, kTopK, choice, kInner, kHidden, 7.0f, scales, 255,
                                       kExpertWideTilePairs);
    ASSERT_EQ(narrow.sorted_pair, wide.sorted_pair);
    EXPECT_EQ(std::memcmp(narrow.h.data(), wide.h.data(), narrow.h.size() * 2), 0);
    EXPECT_EQ(std::memcmp(narrow.y.data(), wide.y.data(), narrow.y.size() * 4), 0);
  }
}

// The narrow grid (one 16-row tile a warp: gate_up's w1 and w3 rows on a warp pair, down's 16
// rows a warp) against the wide one, bit for bit: one token and a batch with tiles of one and two
// MMA groups, with and without pair scales, both decodes (folded scales and two multiplies).
TEST(CudaExpertMma, NarrowGridGivesTheWideGridsBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(37);
  constexpr int kExperts = 6;
  constexpr int64_t kTopK = 3, kInner = 384, kHidden = 256;
  const Experts e = make_experts(kExperts, kInner, kHidden, rng, [](HostWeight& w) {
    for (auto& s : w.scales) s = static_cast<uint8_t>(std::min<int>(s, 128));
  });
  for (const int64_t tokens : {int64_t{1}, int64_t{9}}) {
    const std::vector<float> x = random_floats(static_cast<std::size_t>(tokens * kHidden), rng);
    std::vector<int32_t> choice;
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t s = 0; s < kTopK; ++s) choice.push_back(static_cast<int32_t>((t + 2 * s) % kExperts));
    std::vector<float> pair_scale(choice.size());
    std::uniform_real_distribution<float> weight(0.1f, 1.5f);
    for (auto& s : pair_scale) s = weight(rng);
    for (const std::vector<float>* scales : {static_cast<const std::vector<float>*>(nullptr),
                                             static_cast<const std::vector<float>*>(&pair_scale)})
      for (const int max_e8m0 : {128, 255}) {
        const auto run = [&](ExpertGrid grid) {
          return run_experts(e, kExperts, x, tokens, kTopK, choice, kInner, kHidden, 7.0f, scales, max_e8m0,
                             kExpertTilePairs, grid);
        };
        const ExpertRun wide = run(ExpertGrid::kWide), narrow = run(ExpertGrid::kNarrow);
        const std::string where = "tokens " + std::to_string(tokens) + ", max_e8m0 " + std::to_string(max_e8m0) +
                                  (scales ? ", pair scales" : "");
        ASSERT_EQ(narrow.sorted_pair, wide.sorted_pair) << where;
        EXPECT_EQ(std::memcmp(narrow.h.data(), wide.h.data(), narrow.h.size() * 2), 0) << where;
        EXPECT_EQ(std::memcmp(narrow.y.data(), wide.y.data(), narrow.y.size() * 4), 0) << where;
        bool nonzero = false;
        for (const float v : narrow.y) nonzero |= v != 0.0f;
        EXPECT_TRUE(nonzero) << where;
      }
  }
}

// Every pair's h against the CPU's SwiGLU of its w1 x and w3 x: the kernels keep the activations'
// 24 bits, so gate and up are the CPU's f32 sums in another order, within 1e-5 sum |x w| as the
// SIMT kernels are, and h within what that moves the SwiGLU (silu' <= 1.1) plus its own split's
// 2^-24. Then y against the CPU's w2 of the h the kernel wrote: 1e-5 of sum |h w|.
TEST(CudaExpertMma, MatchesCpuExperts) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(11);
  constexpr int kExperts = 6;
  constexpr int64_t kTokens = 7, kTopK = 3, kInner = 384, kHidden = 256;
  const Experts e = make_experts(kExperts, kInner, kHidden, rng);
  const std::vector<float> x = random_floats(static_cast<std::size_t>(kTokens * kHidden), rng);
  std::vector<float> x_abs = x;
  for (auto& v : x_abs) v = std::fabs(v);
  // Expert 2 takes six tokens (two tiles), 4 one, 5 none, and one slot is skipped (-1).
  const std::vector<int32_t> choice = {2, 0, 1, 2, 3, 4, 2, 0, 1, 2, 3, -1, 2, 1, 3, 2, 0, 1, 0, 3, 1};
  std::uniform_real_distribution<float> weight(0.1f, 1.5f);
  std::vector<float> pair_scale(choice.size());
  for (auto& s : pair_scale) s = weight(rng);
  for (const float limit : {0.0f, 7.0f}) {
    for (const bool scaled : {false, true}) {
      const ExpertRun run = run_experts(e, kExperts, x, kTokens, kTopK, choice, kInner, kHidden, limit,
                                  scaled ? &pair_scale : nullptr);
      const auto pairs = static_cast<int64_t>(choice.size());
      int failures = 0;
      for (int64_t position = 0; position < pairs; ++position) {
        const int64_t pair = run.sorted_pair[static_cast<std::size_t>(position)];
        const int32_t expert = choice[static_cast<std::size_t>(pair)];
        std::vector<float> h(static_cast<std::size_t>(kInner));
        for (int64_t r = 0; r < kInner; ++r) h[static_cast<std::size_t>(r)] = split_value_at(run.h, position, kInner, r);
        const std::vector<float> y(run.y.begin() + position * kHidden, run.y.begin() + (position + 1) * kHidden);
        if (expert < 0) {
          EXPECT_EQ(h, std::vector<float>(h.size(), 0.0f)) << "skipped pair " << pair;
          EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f)) << "skipped pair " << pair;
          continue;
        }
        const int64_t token = pair / kTopK;
        const std::vector<float> xt(x.begin() + token * kHidden, x.begin() + (token + 1) * kHidden);
        const std::vector<float> xt_abs(x_abs.begin() + token * kHidden, x_abs.begin() + (token + 1) * kHidden);
        const std::vector<float> gate = cpu_linear(xt, 1, e.w1[expert].matrix);
        const std::vector<float> up = cpu_linear(xt, 1, e.w3[expert].matrix);
        const std::vector<float> gate_size = cpu_linear(xt_abs, 1, e.w1_abs[expert].matrix);
        const std::vector<float> up_size = cpu_linear(xt_abs, 1, e.w3_abs[expert].matrix);
        const float s = scaled ? pair_scale[static_cast<std::size_t>(pair)] : 1.0f;
        for (int64_t r = 0; r < kInner; ++r) {
          const auto i = static_cast<std::size_t>(r);
          const float want = swiglu(gate[i], up[i], limit) * s;
          const double eg = 1e-5 * gate_size[i], eu = 1e-5 * up_size[i];
          const double bound =
              s * (1.1 * eg * (std::fabs(up[i]) + eu) + (std::fabs(silu(gate[i])) + 1.1 * eg) * eu) +
              1e-6 * std::fabs(want) + 1e-30;
          if (!(std::fabs(h[i] - want) <= bound) && failures++ < 5)
            ADD_FAILURE() << "limit " << limit << " scaled " << scaled << " pair " << pair << " expert " << expert
                          << " h[" << r << "] = " << h[i] << ", cpu " << want << ", bound " << bound;
        }
        std::vector<float> h_abs = h;
        for (auto& v : h_abs) v = std::fabs(v);
        const std::vector<float> want_y = cpu_linear(h, 1, e.w2[expert].matrix);
        const std::vector<float> size_y = cpu_linear(h_abs, 1, absolute(e.w2[expert]).matrix);
        for (int64_t c = 0; c < kHidden; ++c) {
          const auto i = static_cast<std::size_t>(c);
          const double bound = 1e-5 * size_y[i] + 1e-30;
          if (!(std::fabs(y[i] - want_y[i]) <= bound) && failures++ < 5)
            ADD_FAILURE() << "limit " << limit << " scaled " << scaled << " pair " << pair << " expert " << expert
                          << " y[" << c << "] = " << y[i] << ", cpu " << want_y[i] << ", bound " << bound;
        }
      }
      EXPECT_EQ(failures, 0);
    }
  }
}

// Token 0 alone on expert 1, then with others before and after it on the same expert (so it sits
// in another slot of a tile, or in a second tile), then in a batch where other experts run too:
// its h and y keep their bits.
TEST(CudaExpertMma, BatchInvariantBitForBit) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(5);
  constexpr int kExperts = 3;
  constexpr int64_t kInner = 128, kHidden = 384;
  const Experts e = make_experts(kExperts, kInner, kHidden, rng);
  const std::vector<float> pool = random_floats(static_cast<std::size_t>(9 * kHidden), rng, 3.0f);
  const auto token = [&](int64_t t) { return std::vector<float>(pool.begin() + t * kHidden, pool.begin() + (t + 1) * kHidden); };
  std::vector<float> want_y;
  for (const std::vector<int64_t>& batch : {std::vector<int64_t>{0}, std::vector<int64_t>{3, 4, 0},
                                            std::vector<int64_t>{5, 6, 7, 8, 1, 0, 2},
                                            std::vector<int64_t>{2, 0, 1, 3}}) {
    std::vector<float> x;
    std::vector<int32_t> choice;
    int64_t subject = -1;
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const std::vector<float> row = token(batch[i]);
      x.insert(x.end(), row.begin(), row.end());
      if (batch[i] == 0) subject = static_cast<int64_t>(i);
      // In the last batch only token 0 is on expert 1.
      choice.push_back(batch.size() == 4 ? (batch[i] == 0 ? 1 : static_cast<int32_t>(i % 2 == 0 ? 0 : 2)) : 1);
    }
    const ExpertRun run = run_experts(e, kExperts, x, static_cast<int64_t>(batch.size()), 1, choice, kInner, kHidden, 0.0f,
                                nullptr);
    const auto position = static_cast<int64_t>(
        std::find(run.sorted_pair.begin(), run.sorted_pair.end(), subject) - run.sorted_pair.begin());
    const std::vector<float> y(run.y.begin() + position * kHidden, run.y.begin() + (position + 1) * kHidden);
    if (want_y.empty()) {
      want_y = y;
      continue;
    }
    EXPECT_TRUE(same_bits(y, want_y)) << "batch of " << batch.size();
  }
}

// Byte b of row r lands at (r / 16) * 16 * row_bytes + (b / 64) * 1024 + (r % 16) * 64 + b % 64,
// and within each 32-bit word bit k of nibble n at the bit this table gives (kernels.h; the
// decode in kernels/cuda/expert_decode.cuh reads them back).
TEST(CudaExpertMma, TileExpertCodesPlacesEveryBit) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  constexpr int kBitOf[8][4] = {{0, 1, 2, 3},     {27, 28, 29, 4},  {5, 6, 7, 14},    {8, 9, 10, 15},
                                {16, 17, 18, 19}, {11, 12, 13, 20}, {21, 22, 23, 30}, {24, 25, 26, 31}};
  constexpr int64_t kRows = 48, kRowBytes = 192;
  std::vector<uint8_t> codes(static_cast<std::size_t>(kRows * kRowBytes));
  std::mt19937 rng(7);
  for (auto& c : codes) c = static_cast<uint8_t>(rng());
  const DeviceBytes from = to_device(codes);
  DeviceBytes to(codes.size());
  tile_expert_codes(from.at<uint8_t>(), to.at<uint8_t>(), kRows, kRowBytes, kDefaultStream);
  synchronize();
  const std::vector<uint8_t> got = from_device(to.at<uint8_t>(), codes.size());
  const auto word_at = [](const std::vector<uint8_t>& bytes, int64_t at) {
    uint32_t w;
    std::memcpy(&w, bytes.data() + at, 4);
    return w;
  };
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t b = 0; b < kRowBytes; b += 4) {
      const int64_t at = (r / 16) * 16 * kRowBytes + (b / 64) * 1024 + (r % 16) * 64 + b % 64;
      const uint32_t row_major = word_at(codes, r * kRowBytes + b);
      uint32_t want = 0;
      for (int n = 0; n < 8; ++n)
        for (int k = 0; k < 4; ++k) want |= ((row_major >> (4 * n + k)) & 1u) << kBitOf[n][k];
      ASSERT_EQ(word_at(got, at), want) << "row " << r << " byte " << b;
    }
  EXPECT_THROW(tile_expert_codes(from.at<uint8_t>(), to.at<uint8_t>(), 40, kRowBytes, kDefaultStream), Error);
}

TEST(CudaExpertMma, SupportsOnlyTheFp4ReleaseLayout) {
  std::mt19937 rng(1);
  const HostWeight fp4 = make_weight(WeightEncoding::FP4_E2M1, 32, 256, rng, ScaleEncoding::E8M0, 1, 32);
  const HostWeight fp8 = make_weight(WeightEncoding::FP8_E4M3, 32, 256, rng, ScaleEncoding::E8M0, 32, 32);
  const HostWeight wide_groups = make_weight(WeightEncoding::FP4_E2M1, 32, 256, rng, ScaleEncoding::E8M0, 1, 64);
  const HostWeight narrow = make_weight(WeightEncoding::FP4_E2M1, 32, 192, rng, ScaleEncoding::E8M0, 1, 32);
  const HostWeight short_rows = make_weight(WeightEncoding::FP4_E2M1, 24, 256, rng, ScaleEncoding::E8M0, 1, 32);
  WeightMatrix aligned = fp4.matrix, misaligned = fp4.matrix;
  aligned.data = reinterpret_cast<const void*>(uintptr_t{4096});
  misaligned.data = reinterpret_cast<const void*>(uintptr_t{4096 + 8});
  EXPECT_TRUE(expert_tiles_fit(fp4.matrix));
  EXPECT_FALSE(expert_mma_supports(aligned));  // row-major: the kernels decode the tiles' bit order
  WeightMatrix tiled = aligned;
  tiled.layout = WeightLayout::ExpertTiles;
  EXPECT_TRUE(expert_mma_supports(tiled));
  misaligned.layout = WeightLayout::ExpertTiles;
  EXPECT_FALSE(expert_mma_supports(misaligned));
  EXPECT_FALSE(expert_tiles_fit(tiled));  // already tiled
  for (const HostWeight* w : {&fp8, &wide_groups, &narrow, &short_rows}) {
    EXPECT_FALSE(expert_tiles_fit(w->matrix));
    WeightMatrix m = w->matrix;
    m.data = aligned.data;
    m.layout = WeightLayout::ExpertTiles;
    EXPECT_FALSE(expert_mma_supports(m)) << "encoding " << static_cast<int>(m.encoding) << " " << m.rows << " x "
                                         << m.cols << " groups of " << m.block_cols;
  }
}

// The same call through the wgmma kernels (prefill-sized calls on Hopper): y in sorted order.
std::vector<float> run_experts_wgmma(const Experts& e, int experts, const std::vector<float>& x, int64_t top_k,
                                     const std::vector<int32_t>& choice, int64_t inner, int64_t hidden, float limit,
                                     const std::vector<float>* pair_scale, int tile_pairs, int max_e8m0 = 255) {
  const SortedCall call(x, experts, top_k, choice, pair_scale, tile_pairs);
  const int64_t pairs = call.pairs;
  DeviceBytes staged(static_cast<std::size_t>(expert_wgmma_staged_words(call.bound, std::max(inner, hidden), tile_pairs)) * 4);
  DeviceBytes gate(static_cast<std::size_t>(pairs * inner) * 4), up(static_cast<std::size_t>(pairs * inner) * 4),
      y(static_cast<std::size_t>(pairs * hidden) * 4);
  expert_gate_up_wgmma(call.dx.at<float>(), call.sorted_token.at<int32_t>(), call.tiles.at<int32_t>(),
                       call.tile_count.at<int32_t>(), call.bound, e.w1_array.at<WeightMatrix>(),
                       e.w3_array.at<WeightMatrix>(), inner, hidden, staged.at<uint32_t>(), gate.at<float>(),
                       up.at<float>(), kDefaultStream, max_e8m0, tile_pairs);
  expert_down_wgmma(gate.at<float>(), up.at<float>(), limit, call.scales(), call.tiles.at<int32_t>(),
                    call.tile_count.at<int32_t>(), call.bound, e.w2_array.at<WeightMatrix>(), hidden, inner,
                    staged.at<uint32_t>(), y.at<float>(), kDefaultStream, max_e8m0, tile_pairs);
  synchronize();
  return from_device(y.at<float>(), static_cast<std::size_t>(pairs * hidden));
}

// Many pairs an expert (a prefill's): the wgmma kernels give expert_mma's y bit for bit, with
// tiles of 16 and 32 pairs (full and partial ones, an expert with a single pair, a skipped slot),
// with and without pair scales, folded scales or not.
TEST(CudaExpertWgmma, GivesExpertMmasBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  if (expert_wgmma_tile_pairs(1 << 20, 1) == 0) GTEST_SKIP() << "not a Hopper (sm_90) device";
  std::mt19937 rng(41);
  constexpr int kExperts = 6;
  constexpr int64_t kTokens = 61, kTopK = 3, kInner = 256, kHidden = 384;
  // Expert 0 takes one pair, 1 none, the rest about 36 each (a full tile of 32 and a partial one).
  std::vector<int32_t> choice = {0};
  while (static_cast<int64_t>(choice.size()) < kTokens * kTopK)
    choice.push_back(2 + static_cast<int32_t>(choice.size() % (kExperts - 2)));
  choice[7] = -1;
  std::shuffle(choice.begin(), choice.end(), rng);
  const std::vector<float> x = random_floats(static_cast<std::size_t>(kTokens * kHidden), rng);
  std::vector<float> pair_scale(choice.size());
  std::uniform_real_distribution<float> weight(0.1f, 1.5f);
  for (auto& s : pair_scale) s = weight(rng);
  // Scales of at most 128, so that either decode (folded or not) is exact for them.
  const Experts e = make_experts(kExperts, kInner, kHidden, rng, [](HostWeight& w) {
    for (auto& s : w.scales) s = static_cast<uint8_t>(std::min<int>(s, 128));
  });
  const std::vector<float>* const no_scales = nullptr;
  for (const std::vector<float>* scales : {no_scales, static_cast<const std::vector<float>*>(&pair_scale)}) {
    const ExpertRun want = run_experts(e, kExperts, x, kTokens, kTopK, choice, kInner, kHidden, 7.0f, scales);
    for (const int tile_pairs : {16, 32}) {
      for (const int max_e8m0 : {255, 128}) {
        const std::vector<float> got = run_experts_wgmma(e, kExperts, x, kTopK, choice, kInner, kHidden,
                                                         7.0f, scales, tile_pairs, max_e8m0);
        ASSERT_EQ(got.size(), want.y.size());
        int64_t differ = 0, first = -1;
        for (std::size_t i = 0; i < got.size(); ++i)
          if (std::memcmp(&got[i], &want.y[i], 4) != 0 && differ++ == 0) first = static_cast<int64_t>(i);
        EXPECT_EQ(differ, 0) << "tiles of " << tile_pairs << ", max_e8m0 " << max_e8m0 << ", scales "
                             << (scales != nullptr) << ": first at "
                             << first << " (" << (first >= 0 ? got[static_cast<std::size_t>(first)] : 0.0f)
                             << " vs " << (first >= 0 ? want.y[static_cast<std::size_t>(first)] : 0.0f) << ")";
      }
    }
  }
}

// The rule: no wgmma for a decode step's few pairs an expert; tiles of 16, then of 32, as the
// pairs an expert grow (on Hopper; elsewhere never); none past the grid's 65,535 tiles.
TEST(CudaExpertWgmma, TakesPrefillSizedCallsOnly) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  if (expert_wgmma_tile_pairs(1 << 20, 1) == 0) GTEST_SKIP() << "not a Hopper (sm_90) device";
  EXPECT_EQ(expert_wgmma_tile_pairs(64 * 6, 384), 0);
  EXPECT_EQ(expert_wgmma_tile_pairs(256 * 6, 384), 0);
  EXPECT_EQ(expert_wgmma_tile_pairs(512 * 6, 384), 16);
  EXPECT_EQ(expert_wgmma_tile_pairs(8192 * 6, 384), 32);
  EXPECT_EQ(expert_wgmma_tile_pairs(int64_t{1} << 30, 384), 0);  // past the grid's tiles: expert_mma's kernels
  EXPECT_THROW(expert_wgmma_staged_words(10, 256, 8), Error);
}

}  // namespace
}  // namespace deepinfer::kernels::cuda

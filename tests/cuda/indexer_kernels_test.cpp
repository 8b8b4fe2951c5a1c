// The lightning indexer's CUDA kernels (kernels/cuda/indexer.cu, indexer_mma.cu) against the CPU code they
// mirror. Keys are written by model::PagedRows into host blocks (placed and encoded as the CPU
// places them) and read back as the CPU reads them; the expected scores are the loops of
// model/indexer.cpp and model/shared_indexer.cpp written out with model::dot, and must match bit
// for bit. The top-k and the candidate blocks follow shared_indexer.cpp's rules, ties included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "cuda/cuda_test_support.h"
#include "kernels/cuda/attention_kernels.h"
#include "model/fake_quant.h"
#include "model/ops.h"
#include "model/paged_rows.h"

namespace deepinfer::kernels::cuda {
namespace {

using cuda_testing::DeviceBytes;
using cuda_testing::from_device;
using cuda_testing::synchronize;
using cuda_testing::to_device;

constexpr Stream kDefaultStream = nullptr;
constexpr int64_t kBlockTokens = 16;
// Written over the whole scores buffer first: the kernels must neither write nor read past a
// row's visible entries (a NaN read as a score would be picked first).
constexpr uint32_t kUnwrittenBits = 0x7fc0dead;

float unwritten() {
  float value;
  std::memcpy(&value, &kUnwrittenBits, sizeof value);
  return value;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// ---- the rows of a call ----

struct Segment {
  int32_t first_position;
  int32_t rows;
};

struct CallRows {
  int32_t ratio = 0;
  std::vector<SegmentRows> segments;
  std::vector<int32_t> row_segment;
  std::vector<int64_t> positions;
  int32_t max_visible = 0;

  int64_t rows() const { return static_cast<int64_t>(positions.size()); }
  int64_t visible(int64_t row) const { return (positions[row] + 1) / ratio; }
};

CallRows call_rows(const std::vector<Segment>& parts, int32_t ratio) {
  CallRows call;
  call.ratio = ratio;
  for (const Segment& part : parts) {
    SegmentRows segment;
    segment.row_begin = static_cast<int32_t>(call.positions.size());
    segment.rows = part.rows;
    segment.first_position = part.first_position;
    segment.window_first = part.first_position;
    for (int32_t i = 0; i < part.rows; ++i) {
      call.row_segment.push_back(static_cast<int32_t>(call.segments.size()));
      call.positions.push_back(part.first_position + i);
    }
    call.segments.push_back(segment);
  }
  for (int64_t row = 0; row < call.rows(); ++row)
    call.max_visible = std::max(call.max_visible, static_cast<int32_t>(call.visible(row)));
  return call;
}

struct DeviceCall {
  DeviceBytes segments;
  DeviceBytes row_segment;
  const SegmentRows* segment_table() const { return segments.at<SegmentRows>(); }
  const int32_t* row_map() const { return row_segment.at<int32_t>(); }
};

DeviceCall upload(const CallRows& call) { return {to_device(call.segments), to_device(call.row_segment)}; }

// ---- index keys in cache blocks ----

// Each segment's keys, written by model::PagedRows into self-owned host blocks, then copied into
// one device arena in reverse order, so a block table read wrongly reads some other block.
class PagedKeys {
 public:
  // keys[s]: segment s's entries [entries, width] in order.
  PagedKeys(model::CacheFormat format, int64_t width, int64_t ratio, int64_t region_offset,
            const std::vector<std::vector<float>>& keys) {
    const int64_t slots = kBlockTokens / ratio;
    const int64_t row_bytes = model::PagedRows(format, width, ratio, region_offset, slots).row_bytes();
    const int64_t block_bytes = region_offset + slots * row_bytes + 3;
    region_ = {kBlockTokens, ratio, region_offset, row_bytes, static_cast<int32_t>(width),
               static_cast<RowFormat>(format)};
    std::vector<model::CachePages> pages(keys.size());
    for (std::size_t s = 0; s < keys.size(); ++s) {
      pages[s].block_tokens = kBlockTokens;
      pages[s].block_bytes = block_bytes;
      model::PagedRows rows(format, width, ratio, region_offset, slots);
      rows.bind(&pages[s]);
      const auto entries = static_cast<int64_t>(keys[s].size()) / width;
      for (int64_t w = 0; w < entries; ++w) rows.write(w, keys[s].data() + w * width);
      decoded_.emplace_back(keys[s].size());
      rows.read_rows(0, entries, decoded_.back().data());
    }
    std::size_t total_blocks = 0;
    for (const auto& table : pages) total_blocks += table.blocks.size();
    arena_ = DeviceBytes(total_blocks * static_cast<std::size_t>(block_bytes));
    std::vector<std::byte> arena(arena_.size());
    std::size_t placed = 0;
    for (const auto& table : pages) {
      std::vector<std::byte*> addresses;
      for (const std::byte* block : table.blocks) {
        const std::size_t at = (total_blocks - 1 - placed++) * static_cast<std::size_t>(block_bytes);
        std::memcpy(arena.data() + at, block, static_cast<std::size_t>(block_bytes));
        addresses.push_back(arena_.at<std::byte>(at));
      }
      tables_.push_back(to_device(addresses));
    }
    arena_.upload(arena.data(), arena.size());
  }

  const PagedRegion& region() const { return region_; }
  std::byte* const* table(std::size_t segment) const { return tables_[segment].at<std::byte*>(); }
  // Segment s's keys as the CPU reads them back (dequantised).
  const std::vector<float>& decoded(std::size_t segment) const { return decoded_[segment]; }

 private:
  PagedRegion region_;
  std::vector<std::vector<float>> decoded_;
  DeviceBytes arena_;
  std::vector<DeviceBytes> tables_;
};

// ---- the CPU's rules ----

// One entry's score, as index_select and select_entries write it (same expression, compiled
// with the same flags as the model's code).
float cpu_score(const float* q, const float* head_weights, const float* key, int64_t heads, int64_t d) {
  const float score_scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(heads));
  float score = 0.0f;
  for (int64_t h = 0; h < heads; ++h) {
    const float relu = std::max(model::dot(q + h * d, key, d), 0.0f) * score_scale;
    score += relu * (head_weights[h] * weight_scale);
  }
  return score;
}

// shared_indexer.cpp's top_indices.
std::vector<int64_t> cpu_top(const float* scores, std::vector<int64_t> order, int64_t keep) {
  keep = std::min<int64_t>(keep, static_cast<int64_t>(order.size()));
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int64_t a, int64_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
  });
  order.resize(static_cast<std::size_t>(keep));
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<int64_t> all_below(int64_t count) {
  std::vector<int64_t> out(static_cast<std::size_t>(count));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

// select_entries at the candidate source: per block, kept or not.
std::vector<char> cpu_candidates(const float* scores, int64_t visible, int64_t size, int64_t topk_blocks) {
  if (visible == 0) return {};
  const int64_t blocks = (visible + size - 1) / size;
  std::vector<float> block_scores(static_cast<std::size_t>(blocks), -INFINITY);
  for (int64_t w = 0; w < visible; ++w) block_scores[w / size] = std::fmax(block_scores[w / size], scores[w]);
  block_scores[(visible - 1) / size] = INFINITY;
  std::vector<char> kept(static_cast<std::size_t>(blocks), 0);
  for (int64_t b : cpu_top(block_scores.data(), all_below(blocks), topk_blocks)) kept[b] = 1;
  return kept;
}

// select_entries at a later index source: the visible entries of kept blocks.
std::vector<int64_t> entries_in(const std::vector<char>& kept, int64_t visible, int64_t size) {
  std::vector<int64_t> out;
  for (int64_t w = 0; w < visible; ++w)
    if (w / size < static_cast<int64_t>(kept.size()) && kept[w / size]) out.push_back(w);
  return out;
}

// ---- running the kernels ----

struct DevicePicks {
  std::vector<int32_t> picks;  // [rows, topk]
  std::vector<int32_t> count;  // [rows]
};

DevicePicks top_k_on_device(const CallRows& call, const DeviceCall& device_call, const float* scores,
                            const uint8_t* mask, const CandidateParams& candidates, int32_t topk) {
  const auto rows = static_cast<std::size_t>(call.rows());
  DeviceBytes picks(rows * static_cast<std::size_t>(topk) * sizeof(int32_t));
  DeviceBytes count(rows * sizeof(int32_t));
  top_k_entries(device_call.segment_table(), device_call.row_map(), call.rows(), call.ratio, scores, call.max_visible,
                mask, candidates, topk, picks.at<int32_t>(), count.at<int32_t>(), kDefaultStream);
  synchronize();
  return {from_device(picks.at<int32_t>(), rows * static_cast<std::size_t>(topk)), from_device(count.at<int32_t>(), rows)};
}

// Row `row`'s expected picks, -1 padded to topk, against what came back.
void expect_picks(const DevicePicks& got, int64_t row, const std::vector<int64_t>& expected, int32_t topk,
                  const std::string& what) {
  std::vector<int32_t> want(static_cast<std::size_t>(topk), -1);
  std::copy(expected.begin(), expected.end(), want.begin());
  const std::vector<int32_t> row_picks(got.picks.begin() + row * topk, got.picks.begin() + (row + 1) * topk);
  EXPECT_EQ(got.count[row], static_cast<int32_t>(expected.size())) << what << " row " << row;
  EXPECT_EQ(row_picks, want) << what << " row " << row;
}

// ---- a scored call ----

struct ScoreCase {
  model::CacheFormat format;
  int32_t heads;
  int32_t head_dim;
  bool quantized_q;  // V4.1: q fake-quantised to FP4 as select_entries does
  int64_t region_offset;
  std::vector<Segment> parts;
  // > 0: inputs the tensor-core kernel must hand back to model::dot's order. Every fourth key and
  // every third q head have their 32-value blocks scaled 2^(spread * b) apart, every fifth head
  // has a zero block, every seventh is moved off the FP4 grid after quantising.
  int32_t spread = 0;
  bool tensor_cores = true;
};

struct ScoredCall {
  CallRows call;
  PagedKeys keys;  // the blocks call.segments point to
  DeviceCall device_call;
  std::vector<float> expected;  // [rows, max_visible], unwritten() past each row's visible entries
  DeviceBytes scores;           // the kernel's, same shape
};

// Random keys and queries sharing one direction u: every third key points against it, so its
// dot products are negative for every head and its score is exactly 0 (ties); head weights of
// either sign make other scores negative.
ScoredCall score_on_device(const ScoreCase& c, std::mt19937& rng) {
  const int64_t d = c.head_dim;
  const int64_t heads = c.heads;
  constexpr int32_t kRatio = 4;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> u(static_cast<std::size_t>(d));
  for (float& x : u) x = normal(rng);

  CallRows call = call_rows(c.parts, kRatio);
  std::vector<std::vector<float>> keys(call.segments.size());
  for (std::size_t s = 0; s < keys.size(); ++s) {
    const SegmentRows& segment = call.segments[s];
    const int64_t entries = (segment.first_position + segment.rows) / kRatio;
    for (int64_t w = 0; w < entries; ++w)
      for (int64_t i = 0; i < d; ++i)
        keys[s].push_back((w % 3 == 2 ? -2.0f * u[i] + 0.05f * normal(rng) : normal(rng)) *
                          (c.spread > 0 && w % 4 == 1 ? std::ldexp(1.0f, c.spread * static_cast<int>(i / 32)) : 1.0f));
  }
  PagedKeys paged(c.format, d, kRatio, c.region_offset, keys);
  for (std::size_t s = 0; s < keys.size(); ++s) call.segments[s].blocks = paged.table(s);
  DeviceCall device_call = upload(call);
  ScoredCall out{std::move(call), std::move(paged), std::move(device_call), {}, {}};

  std::vector<float> q(static_cast<std::size_t>(out.call.rows() * heads * d));
  for (std::size_t i = 0; i < q.size(); ++i) {
    const auto h = static_cast<int64_t>(i) / d % heads;
    const auto block = static_cast<int>(static_cast<int64_t>(i) % d / 32);
    q[i] = u[i % d] + 0.3f * normal(rng);
    if (c.spread > 0 && h % 3 == 1) q[i] = std::ldexp(q[i], -c.spread * block);
    if (c.spread > 0 && h % 5 == 2 && block == 1) q[i] = 0.0f;
  }
  if (c.quantized_q)
    for (int64_t pair = 0; pair < out.call.rows() * heads; ++pair) {
      model::fake_quantize(model::CacheFormat::Fp4Ue8m0x32,
                           std::span<float>(q.data() + pair * d, static_cast<std::size_t>(d)));
      if (c.spread > 0 && pair % heads % 7 == 6) q[pair * d + 3] += 0.001f;
    }
  std::vector<float> head_weights(static_cast<std::size_t>(out.call.rows() * heads));
  for (float& x : head_weights) x = normal(rng);

  const auto stride = static_cast<int64_t>(out.call.max_visible);
  out.expected.assign(static_cast<std::size_t>(out.call.rows() * stride), unwritten());
  for (int64_t row = 0; row < out.call.rows(); ++row) {
    const std::vector<float>& segment_keys = out.keys.decoded(static_cast<std::size_t>(out.call.row_segment[row]));
    for (int64_t w = 0; w < out.call.visible(row); ++w)
      out.expected[row * stride + w] = cpu_score(q.data() + row * heads * d, head_weights.data() + row * heads,
                                                 segment_keys.data() + w * d, heads, d);
  }

  IndexerParams params;
  params.heads = c.heads;
  params.head_dim = c.head_dim;
  params.ratio = kRatio;
  params.score_scale = 1.0f / std::sqrt(static_cast<float>(d));
  params.weight_scale = 1.0f / std::sqrt(static_cast<float>(heads));
  params.keys = out.keys.region();
  params.max_visible = out.call.max_visible;
  params.tensor_cores = c.tensor_cores;
  const DeviceBytes device_q = to_device(q);
  const DeviceBytes device_weights = to_device(head_weights);
  out.scores = to_device(std::vector<float>(out.expected.size(), unwritten()));
  index_scores(params, out.device_call.segment_table(), out.device_call.row_map(), out.call.rows(), device_q.at<float>(),
               device_weights.at<float>(), out.scores.at<float>(), kDefaultStream);
  synchronize();
  return out;
}

// Bit for bit, and untouched past each row's visible entries.
void expect_scores_match(const ScoredCall& scored, const std::string& what) {
  const std::vector<float> got = from_device(scored.scores.at<float>(), scored.expected.size());
  int mismatches = 0;
  int64_t zeros = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    zeros += scored.expected[i] == 0.0f;
    if (!same_bits(got[i], scored.expected[i]) && mismatches++ < 5)
      ADD_FAILURE() << what << ": score " << i << " (row " << i / scored.call.max_visible << ", entry "
                    << i % scored.call.max_visible << ") is " << got[i] << ", the CPU's " << scored.expected[i];
  }
  EXPECT_EQ(mismatches, 0) << what;
  EXPECT_GT(zeros, 10) << what << ": the case should hold many tied zero scores";
}

// ---- synthetic scores for the selection kernels ----

// Row kinds in turn: small integers (heavy ties, some -0), all zero, distinct normals.
std::vector<float> synthetic_scores(const CallRows& call, std::mt19937& rng) {
  std::uniform_int_distribution<int> small(-2, 3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto stride = static_cast<int64_t>(call.max_visible);
  std::vector<float> scores(static_cast<std::size_t>(call.rows() * stride), unwritten());
  for (int64_t row = 0; row < call.rows(); ++row)
    for (int64_t w = 0; w < call.visible(row); ++w) {
      float& score = scores[row * stride + w];
      switch (row % 3) {
        case 0: {
          const int value = small(rng);
          score = value == -2 ? -0.0f : static_cast<float>(value);
          break;
        }
        case 1: score = 0.0f; break;
        default: score = normal(rng); break;
      }
    }
  return scores;
}

// v = 0 rows, a few entries, 5000 and 2048 entries.
const std::vector<Segment> kSelectionParts = {{0, 3}, {10, 4}, {19999, 3}, {8191, 2}, {4, 2}};

// ---------------------------------------------------------------------------------------------

TEST(CudaIndexScores, F32KeysMatchCpuBitForBit) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(41);
  for (int32_t heads : {64, 8}) {
    const ScoreCase c{model::CacheFormat::F32, heads, 128, false, 36, {{0, 11}, {203, 6}, {997, 4}}};
    const ScoredCall scored = score_on_device(c, rng);
    const std::string what = str_cat("F32 keys, ", heads, " heads");
    expect_scores_match(scored, what);

    // V4's top-k over the same scores (bit-identical, so the picks must be identical).
    constexpr int32_t kTopK = 16;
    const DevicePicks got = top_k_on_device(scored.call, scored.device_call, scored.scores.at<float>(), nullptr, {}, kTopK);
    for (int64_t row = 0; row < scored.call.rows(); ++row)
      expect_picks(got, row,
                   cpu_top(scored.expected.data() + row * scored.call.max_visible, all_below(scored.call.visible(row)),
                           kTopK),
                   kTopK, what);
  }
}

TEST(CudaIndexScores, Fp4KeysAndCandidatesMatchCpu) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(42);
  const ScoreCase c{model::CacheFormat::Fp4Ue8m0x32, 64, 128, true, 37, {{5, 7}, {640, 9}, {1301, 5}}};
  const ScoredCall scored = score_on_device(c, rng);
  expect_scores_match(scored, "FP4 keys");
  const CallRows& call = scored.call;
  const int64_t stride = call.max_visible;

  CandidateParams candidates;
  candidates.block_size = 8;
  candidates.topk_blocks = 6;
  candidates.max_blocks = (call.max_visible + candidates.block_size - 1) / candidates.block_size;
  DeviceBytes mask(static_cast<std::size_t>(call.rows() * candidates.max_blocks));
  candidate_blocks(candidates, scored.device_call.segment_table(), scored.device_call.row_map(), call.rows(), call.ratio,
                   scored.scores.at<float>(), call.max_visible, mask.at<uint8_t>(), kDefaultStream);
  synchronize();
  const std::vector<uint8_t> got_mask = from_device(mask.at<uint8_t>(), mask.size());

  constexpr int32_t kTopK = 20;
  const DevicePicks source = top_k_on_device(call, scored.device_call, scored.scores.at<float>(), nullptr, {}, kTopK);
  const DevicePicks filtered =
      top_k_on_device(call, scored.device_call, scored.scores.at<float>(), mask.at<uint8_t>(), candidates, kTopK);
  for (int64_t row = 0; row < call.rows(); ++row) {
    const float* row_scores = scored.expected.data() + row * stride;
    const int64_t visible = call.visible(row);
    const std::vector<char> kept = cpu_candidates(row_scores, visible, candidates.block_size, candidates.topk_blocks);
    std::vector<uint8_t> want(static_cast<std::size_t>(candidates.max_blocks), 0);
    std::copy(kept.begin(), kept.end(), want.begin());
    EXPECT_EQ(std::vector<uint8_t>(got_mask.begin() + row * candidates.max_blocks,
                                   got_mask.begin() + (row + 1) * candidates.max_blocks),
              want)
        << "candidate blocks of row " << row;
    expect_picks(source, row, cpu_top(row_scores, all_below(visible), kTopK), kTopK, "candidate source");
    expect_picks(filtered, row, cpu_top(row_scores, entries_in(kept, visible, candidates.block_size), kTopK), kTopK,
                 "inside the candidates");
  }
}

TEST(CudaIndexScores, EveryKeyFormatAndDotTail) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(43);
  // 48 and 80 leave a tail of 16 after the 32-lane part, 20 has only the tail; 48 values do not
  // split into FP4's blocks of 32, so those keys are stored f32.
  const std::vector<ScoreCase> cases = {
      {model::CacheFormat::Fp4Ue8m0x32, 8, 48, false, 0, {{0, 9}, {101, 4}}},
      {model::CacheFormat::Fp8Ue8m0x32, 3, 64, false, 5, {{40, 6}, {301, 3}}},
      {model::CacheFormat::Fp4E4m3x16, 5, 80, false, 12, {{77, 5}, {450, 2}}},
      {model::CacheFormat::F32, 2, 20, false, 8, {{3, 3}, {600, 4}}},
      // V4.1's shape on the SIMT kernel (DEEPINFER_CUDA_SIMT=1).
      {model::CacheFormat::Fp4Ue8m0x32, 64, 128, true, 3, {{40, 6}, {301, 3}}, 0, false},
  };
  for (const ScoreCase& c : cases)
    expect_scores_match(score_on_device(c, rng),
                        str_cat("format ", static_cast<int>(c.format), ", ", c.heads, " heads of ", c.head_dim));
}

TEST(CudaIndexScores, TensorCoresGiveTheCpusBits) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(44);
  // Short rows; a row of 20 tiles; 40 rows of 30 tiles (two tiles a block); spans past the exact
  // bound, zero blocks and queries off the FP4 grid.
  const std::vector<Segment> parts = {{0, 5}, {611, 3}, {5000, 1}};
  const std::vector<ScoreCase> cases = {
      {model::CacheFormat::Fp4Ue8m0x32, 64, 128, true, 37, parts},
      {model::CacheFormat::Fp4Ue8m0x32, 64, 128, true, 36, {{7600, 40}}},
      {model::CacheFormat::Fp4Ue8m0x32, 64, 128, true, 0, parts, 6},
      {model::CacheFormat::Fp4Ue8m0x32, 16, 32, true, 5, parts, 3},
      {model::CacheFormat::Fp4Ue8m0x32, 48, 96, true, 12, parts, 4},
      {model::CacheFormat::Fp4Ue8m0x32, 32, 64, false, 8, {{40, 6}, {301, 3}}},  // q not quantised at all
  };
  for (const ScoreCase& c : cases) {
    IndexerParams params;
    params.heads = c.heads;
    params.head_dim = c.head_dim;
    params.keys.format = static_cast<RowFormat>(c.format);
    params.keys.width = c.head_dim;
    ASSERT_TRUE(index_scores_on_tensor_cores(params)) << c.heads << " heads of " << c.head_dim;
    params.tensor_cores = false;
    EXPECT_FALSE(index_scores_on_tensor_cores(params));
    expect_scores_match(score_on_device(c, rng), str_cat(c.heads, " heads of ", c.head_dim, " on the tensor cores, spread ",
                                                         c.spread, c.quantized_q ? "" : ", q not quantised"));
  }
}

TEST(CudaTopKEntries, TiesAndLargeRowsMatchCpu) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(44);
  const CallRows call = call_rows(kSelectionParts, 4);
  const DeviceCall device_call = upload(call);
  const std::vector<float> scores = synthetic_scores(call, rng);
  const DeviceBytes device_scores = to_device(scores);
  for (int32_t topk : {0, 1, 3, 512, 2048, 6000}) {
    const DevicePicks got = top_k_on_device(call, device_call, device_scores.at<float>(), nullptr, {}, topk);
    for (int64_t row = 0; row < call.rows(); ++row)
      expect_picks(got, row, cpu_top(scores.data() + row * call.max_visible, all_below(call.visible(row)), topk), topk,
                   str_cat("topk ", topk));
  }
}

TEST(CudaCandidateBlocks, MasksAndFilteredTopKMatchCpu) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(45);
  const CallRows call = call_rows(kSelectionParts, 4);
  const DeviceCall device_call = upload(call);
  const std::vector<float> scores = synthetic_scores(call, rng);
  const DeviceBytes device_scores = to_device(scores);
  constexpr int32_t kTopK = 512;
  for (int32_t block_size : {8, 5})
    for (int32_t topk_blocks : {0, 1, 7, 64, 700}) {
      CandidateParams candidates;
      candidates.block_size = block_size;
      candidates.topk_blocks = topk_blocks;
      candidates.max_blocks = (call.max_visible + block_size - 1) / block_size + 2;  // a wider stride than needed
      DeviceBytes mask(static_cast<std::size_t>(call.rows() * candidates.max_blocks));
      candidate_blocks(candidates, device_call.segment_table(), device_call.row_map(), call.rows(), call.ratio,
                       device_scores.at<float>(), call.max_visible, mask.at<uint8_t>(), kDefaultStream);
      synchronize();
      const std::vector<uint8_t> got_mask = from_device(mask.at<uint8_t>(), mask.size());
      const DevicePicks got =
          top_k_on_device(call, device_call, device_scores.at<float>(), mask.at<uint8_t>(), candidates, kTopK);
      const std::string what = str_cat("blocks of ", block_size, ", keeping ", topk_blocks);
      for (int64_t row = 0; row < call.rows(); ++row) {
        const float* row_scores = scores.data() + row * call.max_visible;
        const int64_t visible = call.visible(row);
        const std::vector<char> kept = cpu_candidates(row_scores, visible, block_size, topk_blocks);
        std::vector<uint8_t> want(static_cast<std::size_t>(candidates.max_blocks), 0);
        std::copy(kept.begin(), kept.end(), want.begin());
        EXPECT_EQ(std::vector<uint8_t>(got_mask.begin() + row * candidates.max_blocks,
                                       got_mask.begin() + (row + 1) * candidates.max_blocks),
                  want)
            << what << " row " << row;
        expect_picks(got, row, cpu_top(row_scores, entries_in(kept, visible, block_size), kTopK), kTopK, what);
      }
    }
}

TEST(CudaIndexer, RefusesBadArgumentsAndSkipsEmptyCalls) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  IndexerParams params;
  params.heads = 4;
  params.head_dim = 32;
  params.ratio = 4;
  params.keys = {kBlockTokens, 4, 0, 128, 32, RowFormat::F32};
  params.max_visible = 10;
  EXPECT_THROW(index_scores(params, nullptr, nullptr, -1, nullptr, nullptr, nullptr, kDefaultStream), Error);
  IndexerParams wrong_width = params;
  wrong_width.keys.width = 64;
  EXPECT_THROW(index_scores(wrong_width, nullptr, nullptr, 1, nullptr, nullptr, nullptr, kDefaultStream), Error);
  IndexerParams short_rows = params;
  short_rows.keys.row_bytes = 100;
  EXPECT_THROW(index_scores(short_rows, nullptr, nullptr, 1, nullptr, nullptr, nullptr, kDefaultStream), Error);
  index_scores(params, nullptr, nullptr, 0, nullptr, nullptr, nullptr, kDefaultStream);  // nothing to launch

  CandidateParams candidates;
  candidates.block_size = 8;
  candidates.topk_blocks = 2;
  candidates.max_blocks = 1;  // too few for 10 entries in blocks of 8
  EXPECT_THROW(candidate_blocks(candidates, nullptr, nullptr, 1, 4, nullptr, 10, nullptr, kDefaultStream), Error);
  const uint8_t some_mask = 1;  // never read: the shape is refused first
  EXPECT_THROW(
      top_k_entries(nullptr, nullptr, 1, 4, nullptr, 10, &some_mask, candidates, 4, nullptr, nullptr, kDefaultStream),
      Error);
  EXPECT_THROW(top_k_entries(nullptr, nullptr, 1, 4, nullptr, 10, nullptr, {}, -1, nullptr, nullptr, kDefaultStream),
               Error);
  EXPECT_THROW(top_k_entries(nullptr, nullptr, -2, 4, nullptr, 10, nullptr, {}, 4, nullptr, nullptr, kDefaultStream),
               Error);
  candidates.max_blocks = 2;
  candidate_blocks(candidates, nullptr, nullptr, 0, 4, nullptr, 10, nullptr, kDefaultStream);
  top_k_entries(nullptr, nullptr, 0, 4, nullptr, 10, nullptr, {}, 4, nullptr, nullptr, kDefaultStream);
  synchronize();
}

}  // namespace
}  // namespace deepinfer::kernels::cuda

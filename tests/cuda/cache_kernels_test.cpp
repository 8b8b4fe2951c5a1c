// The cache kernels of kernels/cuda/attention_kernels.h against the CPU code they mirror:
// store_rows byte for byte against model::quantize_vector (or a row's f32 bytes; null
// destinations skipped), fake_quantize_rows bit for bit against model::fake_quantize, and
// sink_attention against a host sink softmax (model/attention.cpp attend_head, in double) over
// the keys attention_core gathers, decoded from the same stored bytes the kernel reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/cuda_test_support.h"
#include "kernels/cuda/attention_kernels.h"
#include "model/fake_quant.h"
#include "model/quantized_rows.h"

namespace deepinfer::kernels::cuda {
namespace {

using cuda_testing::DeviceBytes;
using cuda_testing::from_device;
using cuda_testing::synchronize;
using cuda_testing::to_device;
using model::CacheFormat;

constexpr Stream kDefaultStream = nullptr;
constexpr CacheFormat kFormats[] = {CacheFormat::F32, CacheFormat::Fp8Ue8m0x32, CacheFormat::Fp4E4m3x16,
                                    CacheFormat::Fp4Ue8m0x32};
// Widths that block in every format (16 only for the FP4 x16 one), and ones that block in none.
constexpr int64_t kWidths[] = {16, 32, 48, 64, 96, 512, 40, 7};

RowFormat row_format(CacheFormat format) { return static_cast<RowFormat>(format); }

// A row as model::QuantizedRows stores it.
std::vector<uint8_t> host_stored_row(CacheFormat format, const float* row, int64_t width) {
  if (!model::quantizes(format, width)) {
    std::vector<uint8_t> bytes(static_cast<std::size_t>(width) * sizeof(float));
    std::memcpy(bytes.data(), row, bytes.size());
    return bytes;
  }
  const int64_t codes = model::code_bytes(format, width);
  std::vector<uint8_t> bytes(static_cast<std::size_t>(codes + width / model::cache_block(format)));
  model::quantize_vector(format, row, width, bytes.data(), bytes.data() + codes);
  return bytes;
}

std::vector<float> host_decoded_row(CacheFormat format, const std::vector<uint8_t>& stored, int64_t width) {
  std::vector<float> row(static_cast<std::size_t>(width));
  if (!model::quantizes(format, width)) {
    std::memcpy(row.data(), stored.data(), row.size() * sizeof(float));
  } else {
    model::dequantize_vector(format, stored.data(), stored.data() + model::code_bytes(format, width), width,
                             row.data());
  }
  return row;
}

// ---------------------------------------------------------------------------------------------
// Rows that reach every branch of the encoders.

// The value a block's codes are multiplied by, as quantize_vector picks it for `block`.
double block_scale(CacheFormat format, const float* block) {
  const int64_t n = model::cache_block(format);
  std::vector<uint8_t> codes(static_cast<std::size_t>(model::code_bytes(format, n)));
  uint8_t scale = 0;
  model::quantize_vector(format, block, n, codes.data(), &scale);
  return format == CacheFormat::Fp4E4m3x16 ? model::e4m3_decode(scale) : std::ldexp(1.0, scale - 127);
}

// Magnitudes on the format's code grid and halfway between neighbours (the rounding ties).
std::vector<double> grid_and_midpoints(CacheFormat format) {
  std::vector<double> grid;
  if (format == CacheFormat::Fp8Ue8m0x32) {
    for (int code = 0; code <= 0x7e; ++code) grid.push_back(model::e4m3_decode(static_cast<uint8_t>(code)));
  } else {
    for (int code = 0; code < 8; ++code) grid.push_back(model::e2m1_decode(static_cast<uint8_t>(code)));
  }
  std::vector<double> out = grid;
  for (std::size_t i = 0; i + 1 < grid.size(); ++i) out.push_back((grid[i] + grid[i + 1]) / 2);
  return out;
}

// Every block's values but its largest become ± grid points or midpoints under the block's own
// scale (exact products), at most its amax so the scale stays.
void put_block_values_on_ties(CacheFormat format, float* row, int64_t width, std::mt19937& rng) {
  if (!model::quantizes(format, width)) return;
  const int64_t block = model::cache_block(format);
  const std::vector<double> candidates = grid_and_midpoints(format);
  std::uniform_int_distribution<std::size_t> pick(0, candidates.size() - 1);
  for (int64_t first = 0; first < width; first += block) {
    float* values = row + first;
    const auto largest =
        std::max_element(values, values + block, [](float a, float b) { return std::fabs(a) < std::fabs(b); });
    const double amax = std::fabs(*largest);
    const double scale = block_scale(format, values);
    for (float* v = values; v < values + block; ++v) {
      if (v == largest) continue;
      double magnitude = candidates[pick(rng)] * scale;
      while (magnitude > amax) magnitude = candidates[pick(rng)] * scale;
      *v = static_cast<float>(rng() % 2 ? magnitude : -magnitude);
    }
  }
}

std::vector<float> edge_case_rows(CacheFormat format, int64_t count, int64_t width, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // Block maxima around FP8's 448 / 480 edges, also as an FP4 e4m3 scale (6 times them).
  constexpr float kEdges[] = {447.0f, 448.0f, 456.0f, 464.0f, 465.0f, 470.0f, 479.9f, 480.0f, 481.0f,
                              2688.0f, 2784.0f, 2785.0f, 2820.0f, 2879.0f, 2881.0f, 1e38f, 3.4e38f};
  std::vector<float> rows(static_cast<std::size_t>(count * width));
  for (int64_t r = 0; r < count; ++r) {
    float* row = rows.data() + r * width;
    for (int64_t i = 0; i < width; ++i) {
      float& v = row[i];
      switch (r % 8) {
        case 0: v = normal(rng); break;
        case 1: v = normal(rng) * 1e4f; break;
        case 2: v = normal(rng) * std::pow(10.0f, -12.0f + 9.0f * unit(rng)); break;  // floors, subnormal codes
        case 3: v = normal(rng); break;  // put on ties below
        case 4: {  // zeros of both signs, float subnormals
          const float choices[] = {0.0f, -0.0f, 1e-40f, -1e-45f, 1e-38f};
          v = choices[rng() % 5];
          break;
        }
        case 5: {  // NaN of both signs and infinities among ordinary values
          const float choices[] = {kNan, -kNan, kInf, -kInf};
          v = unit(rng) < 0.15f ? choices[rng() % 4] : normal(rng);
          break;
        }
        case 6:  // a few block maxima on the edges
          v = unit(rng) < 0.1f ? kEdges[rng() % std::size(kEdges)] * (rng() % 2 ? 1.0f : -1.0f) : normal(rng);
          break;
        default: v = normal(rng) * 100.0f; break;
      }
    }
    if (r % 8 == 3) put_block_values_on_ties(format, row, width, rng);
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// store_rows and fake_quantize_rows

TEST(CudaCacheRows, StoredRowBytesAreQuantizedRowsRowBytes) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  for (CacheFormat format : kFormats)
    for (int64_t width : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{32}, int64_t{48}, int64_t{128}, int64_t{512}})
      EXPECT_EQ(stored_row_bytes(row_format(format), width), model::QuantizedRows(format, width).row_bytes())
          << "format " << static_cast<int>(format) << " width " << width;
  EXPECT_EQ(stored_row_bytes(RowFormat::Fp8Ue8m0x32, 512), 512 + 16);
  EXPECT_EQ(stored_row_bytes(RowFormat::Fp4E4m3x16, 512), 256 + 32);
  EXPECT_EQ(stored_row_bytes(RowFormat::Fp4Ue8m0x32, 128), 64 + 4);
  EXPECT_EQ(stored_row_bytes(RowFormat::Fp8Ue8m0x32, 48), 48 * 4);
  EXPECT_THROW(stored_row_bytes(RowFormat::F32, -1), Error);
}

TEST(CudaCacheRows, StoreRowsMatchesQuantizeVectorByteForByte) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(20240611);
  constexpr int64_t kCount = 40;
  for (CacheFormat format : kFormats) {
    for (int64_t width : kWidths) {
      // gap 0: rows back to back from an aligned address; gap 3: misaligned rows.
      for (int64_t gap : {int64_t{0}, int64_t{3}}) {
        const std::vector<float> rows = edge_case_rows(format, kCount, width, rng);
        const int64_t row_bytes = stored_row_bytes(row_format(format), width);
        const int64_t pitch = row_bytes + gap;
        // Rows land in reverse order, so a destination is not just row * pitch; every seventh
        // row has a null destination and is kept nowhere.
        const auto skipped = [](int64_t r) { return r % 7 == 5; };
        std::vector<uint8_t> expected(static_cast<std::size_t>(kCount * pitch + gap), 0xa5);
        std::vector<int64_t> offsets(kCount);
        for (int64_t r = 0; r < kCount; ++r) {
          offsets[r] = gap + (kCount - 1 - r) * pitch;
          if (skipped(r)) continue;
          const std::vector<uint8_t> stored = host_stored_row(format, rows.data() + r * width, width);
          std::copy(stored.begin(), stored.end(), expected.begin() + offsets[r]);
        }
        DeviceBytes buffer = to_device(std::vector<uint8_t>(expected.size(), 0xa5));
        std::vector<std::byte*> destinations(kCount, nullptr);
        for (int64_t r = 0; r < kCount; ++r)
          if (!skipped(r)) destinations[r] = buffer.at<std::byte>(offsets[r]);
        const DeviceBytes device_destinations = to_device(destinations);
        const DeviceBytes device_rows = to_device(rows);
        store_rows(device_rows.at<float>(), kCount, width, row_format(format), device_destinations.at<std::byte*>(),
                   kDefaultStream);
        synchronize();
        const std::vector<uint8_t> got = from_device(buffer.at<uint8_t>(), expected.size());
        const auto mismatch = std::mismatch(got.begin(), got.end(), expected.begin());
        if (mismatch.first != got.end()) {
          const auto at = static_cast<int64_t>(mismatch.first - got.begin());
          const int64_t row = kCount - 1 - (at - gap) / pitch;
          ADD_FAILURE() << "format " << static_cast<int>(format) << " width " << width << " gap " << gap << ": byte "
                        << at << " (row " << row << ", byte " << (at - gap) % pitch << ") got "
                        << int{*mismatch.first} << " expected " << int{*mismatch.second};
        }
      }
    }
  }
}

TEST(CudaCacheRows, FakeQuantizeRowsMatchesFakeQuantizeBitForBit) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(99);
  constexpr int64_t kCount = 48;
  for (CacheFormat format : kFormats) {
    for (int64_t width : kWidths) {
      const std::vector<float> rows = edge_case_rows(format, kCount, width, rng);
      std::vector<float> expected = rows;
      for (int64_t r = 0; r < kCount; ++r)
        model::fake_quantize(format, std::span<float>(expected.data() + r * width, static_cast<std::size_t>(width)));
      DeviceBytes device_rows = to_device(rows);
      fake_quantize_rows(device_rows.at<float>(), kCount, width, row_format(format), kDefaultStream);
      synchronize();
      const std::vector<float> got = from_device(device_rows.at<float>(), rows.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        uint32_t got_bits = 0, expected_bits = 0;
        std::memcpy(&got_bits, &got[i], 4);
        std::memcpy(&expected_bits, &expected[i], 4);
        if (got_bits != expected_bits) {
          ADD_FAILURE() << "format " << static_cast<int>(format) << " width " << width << ": value " << i << " ("
                        << rows[i] << ") got " << got[i] << " (0x" << std::hex << got_bits << ") expected "
                        << expected[i] << " (0x" << expected_bits << ")" << std::dec;
          break;
        }
      }
    }
  }
}

TEST(CudaCacheRows, ChecksSizesAndSkipsEmptyCalls) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  EXPECT_THROW(store_rows(nullptr, -1, 32, RowFormat::Fp8Ue8m0x32, nullptr, kDefaultStream), Error);
  EXPECT_THROW(store_rows(nullptr, 2, -32, RowFormat::F32, nullptr, kDefaultStream), Error);
  EXPECT_THROW(fake_quantize_rows(nullptr, -2, 32, RowFormat::Fp4Ue8m0x32, kDefaultStream), Error);
  EXPECT_NO_THROW(store_rows(nullptr, 0, 32, RowFormat::Fp8Ue8m0x32, nullptr, kDefaultStream));
  EXPECT_NO_THROW(store_rows(nullptr, 3, 0, RowFormat::F32, nullptr, kDefaultStream));
  // A width that does not block leaves fake quantisation nothing to do: nothing is launched.
  EXPECT_NO_THROW(fake_quantize_rows(nullptr, 5, 40, RowFormat::Fp8Ue8m0x32, kDefaultStream));
  synchronize();
}

// ---------------------------------------------------------------------------------------------
// sink_attention

struct SegmentSpec {
  int32_t rows = 0;
  int32_t first_position = 0;
  int32_t window_first = 0;
};

struct AttentionCase {
  int32_t heads = 0;
  int32_t head_dim = 0;
  int32_t window = 0;
  CacheFormat window_format = CacheFormat::F32;
  int64_t window_row_padding = 0;  // bytes between stored rows in the window stride
  CompressedKeys compressed = CompressedKeys::None;
  int32_t ratio = 0;
  CacheFormat entry_format = CacheFormat::F32;
  int64_t block_tokens = 8;
  int64_t region_offset = 0;
  int32_t topk = 0;  // Picked: picks per row (fewer where fewer are visible, and some rows fewer still)
  std::vector<SegmentSpec> segments;
  bool tensor_cores = false;  // sink_attention_on_tensor_cores: the case runs both kernels
};

// Random bytes: what a row the kernel must not read holds.
std::vector<uint8_t> garbage(std::size_t bytes, std::mt19937& rng) {
  std::vector<uint8_t> out(bytes);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

std::vector<float> normal_row(int64_t width, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(static_cast<std::size_t>(width));
  for (auto& v : row) v = normal(rng);
  return row;
}

// One segment's cache as the kernel reads it, with the host's decoded copies of the same rows.
struct SegmentCache {
  DeviceBytes ring;
  std::vector<DeviceBytes> blocks;
  DeviceBytes block_table;
  std::vector<std::vector<float>> ring_keys;  // by position (empty outside [window_first, first_position))
  std::vector<std::vector<float>> entry_keys;  // by entry
};

// attend_head in double: the sink logit in the max and the denominator, no value of its own.
void host_attend_head(const float* q, const std::vector<const float*>& keys, int64_t d, float scale, float sink,
                      float* out) {
  std::vector<double> logits(keys.size());
  double max_logit = sink;
  for (std::size_t j = 0; j < keys.size(); ++j) {
    double dot = 0;
    for (int64_t e = 0; e < d; ++e) dot += static_cast<double>(q[e]) * keys[j][e];
    logits[j] = dot * scale;
    max_logit = std::max(max_logit, logits[j]);
  }
  double denominator = std::exp(static_cast<double>(sink) - max_logit);
  for (double& logit : logits) {
    logit = std::exp(logit - max_logit);
    denominator += logit;
  }
  for (int64_t e = 0; e < d; ++e) {
    double sum = 0;
    for (std::size_t j = 0; j < keys.size(); ++j) sum += logits[j] * keys[j][e];
    out[e] = static_cast<float>(sum / denominator);
  }
}

void expect_sink_attention_matches_host(const AttentionCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t d = c.head_dim;
  const int64_t heads = c.heads;
  int64_t total_rows = 0;
  int32_t ring_rows = 1;
  for (const SegmentSpec& s : c.segments) {
    total_rows += s.rows;
    ring_rows = std::max(ring_rows, s.first_position - s.window_first);
  }
  const int32_t capacity = ring_rows + 3;  // more slots than rows, so a wrong slot reads garbage
  const int64_t window_stride = stored_row_bytes(row_format(c.window_format), d) + c.window_row_padding;
  const bool has_entries = c.compressed != CompressedKeys::None;
  const int64_t entry_bytes = stored_row_bytes(row_format(c.entry_format), d);

  // The call's own rows.
  std::vector<uint8_t> call_bytes = garbage(static_cast<std::size_t>(total_rows * window_stride), rng);
  std::vector<std::vector<float>> call_keys;
  for (int64_t t = 0; t < total_rows; ++t) {
    const std::vector<float> row = normal_row(d, rng);
    const std::vector<uint8_t> stored = host_stored_row(c.window_format, row.data(), d);
    std::copy(stored.begin(), stored.end(), call_bytes.begin() + t * window_stride);
    call_keys.push_back(host_decoded_row(c.window_format, stored, d));
  }

  // Each segment's ring and paged entries.
  std::vector<SegmentCache> caches(c.segments.size());
  std::vector<SegmentRows> segment_rows;
  std::vector<int32_t> row_segment;
  std::vector<int64_t> row_position;
  int32_t row_begin = 0;
  for (std::size_t s = 0; s < c.segments.size(); ++s) {
    const SegmentSpec& spec = c.segments[s];
    SegmentCache& cache = caches[s];
    const int64_t end_position = spec.first_position + spec.rows;
    std::vector<uint8_t> ring = garbage(static_cast<std::size_t>(capacity * window_stride), rng);
    cache.ring_keys.resize(static_cast<std::size_t>(end_position));
    for (int32_t p = spec.window_first; p < spec.first_position; ++p) {
      const std::vector<float> row = normal_row(d, rng);
      const std::vector<uint8_t> stored = host_stored_row(c.window_format, row.data(), d);
      std::copy(stored.begin(), stored.end(), ring.begin() + (p % capacity) * window_stride);
      cache.ring_keys[p] = host_decoded_row(c.window_format, stored, d);
    }
    cache.ring = to_device(ring);
    std::vector<std::byte*> table;
    if (has_entries) {
      const int64_t slots = c.block_tokens / c.ratio;
      const int64_t block_bytes = c.region_offset + slots * entry_bytes + 16;
      const int64_t block_count = (end_position + c.block_tokens - 1) / c.block_tokens;
      std::vector<std::vector<uint8_t>> blocks;
      for (int64_t k = 0; k < block_count; ++k) blocks.push_back(garbage(static_cast<std::size_t>(block_bytes), rng));
      for (int64_t w = 0; w < end_position / c.ratio; ++w) {
        const int64_t k = ((w + 1) * c.ratio - 1) / c.block_tokens;
        const int64_t slot = w - k * c.block_tokens / c.ratio;
        const std::vector<float> row = normal_row(d, rng);
        const std::vector<uint8_t> stored = host_stored_row(c.entry_format, row.data(), d);
        std::copy(stored.begin(), stored.end(), blocks[k].begin() + c.region_offset + slot * entry_bytes);
        cache.entry_keys.push_back(host_decoded_row(c.entry_format, stored, d));
      }
      for (const auto& block : blocks) {
        cache.blocks.push_back(to_device(block));
        table.push_back(cache.blocks.back().at<std::byte>());
      }
      cache.block_table = to_device(table);
    }
    SegmentRows rows;
    rows.row_begin = row_begin;
    rows.rows = spec.rows;
    rows.first_position = spec.first_position;
    rows.window_first = spec.window_first;
    rows.window_ring = cache.ring.at<std::byte>();
    rows.blocks = has_entries ? cache.block_table.at<std::byte*>() : nullptr;
    segment_rows.push_back(rows);
    for (int32_t t = 0; t < spec.rows; ++t) {
      row_segment.push_back(static_cast<int32_t>(s));
      row_position.push_back(spec.first_position + t);
    }
    row_begin += spec.rows;
  }

  // Picks: an ascending random subset of the visible entries, -1 past the count.
  const int32_t pick_stride = c.topk + 2;
  std::vector<int32_t> picks(static_cast<std::size_t>(total_rows * pick_stride), -1);
  std::vector<int32_t> pick_count(static_cast<std::size_t>(total_rows), 0);
  if (c.compressed == CompressedKeys::Picked) {
    for (int64_t t = 0; t < total_rows; ++t) {
      const auto visible = static_cast<int32_t>((row_position[t] + 1) / c.ratio);
      int32_t count = std::min(c.topk, visible);
      if (t % 5 == 4) count /= 2;
      std::vector<int32_t> entries(static_cast<std::size_t>(visible));
      std::iota(entries.begin(), entries.end(), 0);
      std::shuffle(entries.begin(), entries.end(), rng);
      entries.resize(static_cast<std::size_t>(count));
      std::sort(entries.begin(), entries.end());
      std::copy(entries.begin(), entries.end(), picks.begin() + t * pick_stride);
      pick_count[t] = count;
    }
  }

  std::vector<float> q(static_cast<std::size_t>(total_rows * heads * d));
  for (auto& v : q) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  std::vector<float> sink = normal_row(heads, rng);
  sink[0] = 6.0f;  // a sink that takes most of the mass

  const DeviceBytes device_call_rows = to_device(call_bytes);
  const DeviceBytes device_segments = to_device(segment_rows);
  const DeviceBytes device_row_segment = to_device(row_segment);
  const DeviceBytes device_picks = to_device(picks);
  const DeviceBytes device_pick_count = to_device(pick_count);
  const DeviceBytes device_q = to_device(q);
  const DeviceBytes device_sink = to_device(sink);

  AttentionParams params;
  params.heads = c.heads;
  params.head_dim = c.head_dim;
  params.window = c.window;
  params.window_capacity = capacity;
  params.window_row_bytes = window_stride;
  params.window_format = row_format(c.window_format);
  params.scale = 1.0f / std::sqrt(static_cast<float>(d));
  params.sink = device_sink.at<float>();
  params.call_rows = device_call_rows.at<std::byte>();
  params.compressed = c.compressed;
  params.ratio = c.ratio;
  if (has_entries) {
    params.entries.block_tokens = c.block_tokens;
    params.entries.ratio = c.ratio;
    params.entries.offset = c.region_offset;
    params.entries.row_bytes = entry_bytes;
    params.entries.width = c.head_dim;
    params.entries.format = row_format(c.entry_format);
  }
  if (c.compressed == CompressedKeys::Picked) {
    params.picks = device_picks.at<int32_t>();
    params.pick_count = device_pick_count.at<int32_t>();
    params.pick_stride = pick_stride;
  }
  EXPECT_EQ(sink_attention_on_tensor_cores(params), c.tensor_cores);

  // The host: attention_core's key order, then attend_head.
  std::vector<float> expected(q.size());
  int32_t max_row_keys = 0;
  for (int64_t t = 0; t < total_rows; ++t) {
    const SegmentSpec& spec = c.segments[row_segment[t]];
    const SegmentCache& cache = caches[row_segment[t]];
    const int64_t p = row_position[t];
    std::vector<const float*> keys;
    const int64_t oldest = std::max({int64_t{0}, p - c.window + 1, int64_t{spec.window_first}});
    for (int64_t position = oldest; position <= p; ++position)
      keys.push_back(position >= spec.first_position
                         ? call_keys[segment_rows[row_segment[t]].row_begin + position - spec.first_position].data()
                         : cache.ring_keys[position].data());
    if (c.compressed == CompressedKeys::Visible)
      for (int64_t w = 0; w < (p + 1) / c.ratio; ++w) keys.push_back(cache.entry_keys[w].data());
    if (c.compressed == CompressedKeys::Picked)
      for (int32_t i = 0; i < pick_count[t]; ++i) keys.push_back(cache.entry_keys[picks[t * pick_stride + i]].data());
    max_row_keys = std::max(max_row_keys, static_cast<int32_t>(keys.size()));
    for (int64_t h = 0; h < heads; ++h)
      host_attend_head(q.data() + (t * heads + h) * d, keys, d, params.scale, sink[h],
                       expected.data() + (t * heads + h) * d);
  }
  // Both kernels where the tensor-core one applies (the SIMT one is DEEPINFER_CUDA_SIMT=1's), the
  // tensor-core one also with its keys split over blocks where this call is small enough, and
  // with fixed key ranges (--batch-invariant's), walked by one block and, where the call is small
  // enough, on blocks of their own: those two must give the same bits.
  struct Variant {
    const char* name;
    bool tensor_cores;
    bool split;
    int32_t range_keys;
  };
  const Variant variants[] = {{"tensor cores", true, false, 0},
                              {"split keys", true, true, 0},
                              {"32-key ranges walked", true, false, 32},
                              {"32-key ranges split", true, true, 32},
                              {"invariant ranges walked", true, false, kInvariantRangeKeys},
                              {"invariant ranges split", true, true, kInvariantRangeKeys},
                              {"SIMT", false, false, 0}};
  std::vector<float> walked;  // the last walked variant's output
  for (const Variant& variant : variants) {
    if (variant.tensor_cores && !c.tensor_cores) continue;
    const int64_t split_floats =
        sink_attention_split_floats(total_rows, c.heads, c.head_dim, max_row_keys, variant.range_keys);
    if (variant.split && split_floats == 0) continue;
    SCOPED_TRACE(variant.name);
    params.tensor_cores = variant.tensor_cores;
    params.range_keys = variant.range_keys;
    params.max_row_keys = max_row_keys;
    DeviceBytes workspace = to_device(std::vector<float>(static_cast<std::size_t>(std::max<int64_t>(split_floats, 1)),
                                                         std::numeric_limits<float>::quiet_NaN()));
    params.split_workspace = variant.split ? workspace.at<float>() : nullptr;
    DeviceBytes out = to_device(std::vector<float>(q.size(), std::numeric_limits<float>::quiet_NaN()));
    sink_attention(params, device_segments.at<SegmentRows>(), device_row_segment.at<int32_t>(), total_rows,
                   device_q.at<float>(), out.at<float>(), kDefaultStream);
    synchronize();
    const std::vector<float> got = from_device(out.at<float>(), q.size());
    int failures = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double tolerance = 1e-5 * std::fabs(expected[i]) + 1e-6;
      if (!(std::fabs(got[i] - expected[i]) <= tolerance) && failures++ < 5) {
        const auto pair = static_cast<int64_t>(i) / d;
        ADD_FAILURE() << "row " << pair / heads << " head " << pair % heads << " element "
                      << static_cast<int64_t>(i) % d << ": got " << got[i] << " expected " << expected[i];
      }
    }
    EXPECT_EQ(failures, 0);
    if (variant.range_keys > 0 && !variant.split) walked = got;
    if (variant.range_keys > 0 && variant.split) {
      int differences = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(&got[i], &walked[i], sizeof(float)) != 0 && differences++ < 5)
          ADD_FAILURE() << "element " << i << ": split " << got[i] << ", walked " << walked[i];
      EXPECT_EQ(differences, 0) << "fixed ranges on blocks of their own must give the walked bits";
    }
  }
  params.range_keys = 0;
}

TEST(CudaSinkAttention, WindowOnlyReadsTheRingAndTheCallRows) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  AttentionCase c;
  c.heads = 4;
  c.head_dim = 64;
  c.window = 8;
  // Position 20 sees ring rows 13..19 and itself; 24 sees ring rows 17..19 and call rows; the
  // second segment's rows see fewer than a window.
  c.segments = {{5, 20, 13}, {3, 2, 0}};
  expect_sink_attention_matches_host(c, 1);
}

TEST(CudaSinkAttention, V4VisibleEntriesInPagedBlocks) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  for (CacheFormat entry_format : {CacheFormat::F32, CacheFormat::Fp4Ue8m0x32}) {
    AttentionCase c;
    c.heads = 8;
    c.head_dim = 128;
    c.window = 16;
    c.compressed = CompressedKeys::Visible;
    c.ratio = 4;
    c.entry_format = entry_format;
    c.block_tokens = 8;
    c.region_offset = 52;
    // Positions 0..2 see no entry; the third segment's store restarted at 47 (a window replay).
    c.segments = {{6, 30, 15}, {3, 0, 0}, {2, 50, 47}, {1, 41, 26}};
    SCOPED_TRACE(static_cast<int>(entry_format));
    expect_sink_attention_matches_host(c, 2);
  }
}

TEST(CudaSinkAttention, V41PickedFp4EntriesAndFp8Window) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  AttentionCase c;
  c.heads = 16;
  c.head_dim = 512;
  c.window = 16;
  c.window_format = CacheFormat::Fp8Ue8m0x32;
  c.window_row_padding = 8;
  c.compressed = CompressedKeys::Picked;
  c.ratio = 4;
  c.entry_format = CacheFormat::Fp4E4m3x16;
  c.block_tokens = 16;
  c.region_offset = 100;
  c.topk = 8;
  // Position 0 has nothing to pick; row 4 (t % 5 == 4) picks half of what it could.
  c.tensor_cores = true;
  c.segments = {{4, 64, 49}, {3, 9, 0}, {1, 0, 0}};
  expect_sink_attention_matches_host(c, 3);
}

// V4.1-Flash's CSA layer: 64 heads of 512, a window of 128 FP8 rows and picked FP4 entries.
AttentionCase v41_flash_case(int64_t block_tokens, int64_t region_offset, int32_t topk) {
  AttentionCase c;
  c.heads = 64;
  c.head_dim = 512;
  c.window = 128;
  c.window_format = CacheFormat::Fp8Ue8m0x32;
  c.compressed = CompressedKeys::Picked;
  c.ratio = 4;
  c.entry_format = CacheFormat::Fp4E4m3x16;
  c.block_tokens = block_tokens;
  c.region_offset = region_offset;
  c.topk = topk;
  c.tensor_cores = true;
  return c;
}

TEST(CudaSinkAttention, SixtyFourHeadsOf512) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  AttentionCase c = v41_flash_case(/*block_tokens=*/64, /*region_offset=*/4096, /*topk=*/32);
  c.segments = {{3, 300, 173}, {2, 130, 3}};
  expect_sink_attention_matches_host(c, 4);
}

// A decode row of V4.1-Flash's shape at a long context (the window's 128 rows and 1,024 picks):
// unsplit its keys are 36 tiles of one block; split, up to 16 ranges and the combining pass.
TEST(CudaSinkAttention, V41FlashDecodeRowsWithTheirKeysSplit) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  AttentionCase c = v41_flash_case(/*block_tokens=*/256, /*region_offset=*/0, /*topk=*/1024);
  c.segments = {{1, 4400, 4200}, {1, 600, 400}};  // 128 + 1,024 keys and 128 + 150
  EXPECT_GT(sink_attention_split_floats(2, c.heads, c.head_dim, /*max_row_keys=*/0, /*range_keys=*/0), 0);
  EXPECT_GT(sink_attention_split_floats(2, c.heads, c.head_dim, /*max_row_keys=*/1152, kInvariantRangeKeys), 0);
  expect_sink_attention_matches_host(c, 9);
}

// The tensor-core kernel's edges: heads not a multiple of its 16, head_dim 128 (one k step per
// warp, ldmatrix x2) and 384 (x4 then x2), several 32-key tiles with a partial last one, and
// FP4 entries under E8M0 scales.
TEST(CudaSinkAttention, TensorCoreKernelAtOddWidthsAndHeadCounts) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  for (const int32_t head_dim : {128, 384}) {
    AttentionCase c;
    c.heads = head_dim == 128 ? 20 : 40;
    c.head_dim = head_dim;
    c.window = 45;
    c.window_format = CacheFormat::Fp8Ue8m0x32;
    c.compressed = CompressedKeys::Visible;
    c.ratio = 4;
    c.entry_format = CacheFormat::Fp4Ue8m0x32;
    c.block_tokens = 32;
    c.region_offset = 64;
    c.tensor_cores = true;
    c.segments = {{3, 97, 40}, {2, 0, 0}, {1, 33, 0}};
    SCOPED_TRACE(head_dim);
    expect_sink_attention_matches_host(c, 7);
  }
}

TEST(CudaSinkAttention, TensorCoreKernelWithNoKeysGivesZeros) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  AttentionCase c;
  c.heads = 16;
  c.head_dim = 256;
  c.window = 0;
  c.window_format = CacheFormat::Fp8Ue8m0x32;
  c.tensor_cores = true;
  c.segments = {{2, 5, 5}};
  expect_sink_attention_matches_host(c, 8);
}

TEST(CudaSinkAttention, HeadsNotAMultipleOfEightAndAWidthThatDoesNotBlock) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  AttentionCase c;
  c.heads = 12;
  c.head_dim = 48;  // FP8 rows of 48 are stored as f32; FP4 x16 entries of 48 are quantised
  c.window = 3;
  c.window_format = CacheFormat::Fp8Ue8m0x32;
  c.compressed = CompressedKeys::Visible;
  c.ratio = 2;
  c.entry_format = CacheFormat::Fp4E4m3x16;
  c.block_tokens = 4;
  c.region_offset = 12;
  c.segments = {{5, 7, 5}, {2, 0, 0}};
  expect_sink_attention_matches_host(c, 5);
}

TEST(CudaSinkAttention, NoKeysGiveZeros) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  AttentionCase c;
  c.heads = 4;
  c.head_dim = 32;
  c.window = 0;  // not even the row itself
  c.segments = {{3, 5, 5}};
  expect_sink_attention_matches_host(c, 6);
}

TEST(CudaSinkAttention, ChecksItsArguments) {
  DEEPINFER_REQUIRE_CUDA_DEVICE();
  AttentionParams params;
  params.heads = 4;
  params.head_dim = 64;
  params.window = 8;
  params.window_capacity = 8;
  params.window_row_bytes = 64 * 4;
  // No rows: nothing launched, whatever the pointers.
  EXPECT_NO_THROW(sink_attention(params, nullptr, nullptr, 0, nullptr, nullptr, kDefaultStream));
  EXPECT_THROW(sink_attention(params, nullptr, nullptr, -1, nullptr, nullptr, kDefaultStream), Error);
  AttentionParams negative = params;
  negative.heads = -4;
  EXPECT_THROW(sink_attention(negative, nullptr, nullptr, 0, nullptr, nullptr, kDefaultStream), Error);
  AttentionParams too_wide = params;
  too_wide.head_dim = 1024;
  too_wide.window_row_bytes = 1024 * 4;
  EXPECT_THROW(sink_attention(too_wide, nullptr, nullptr, 1, nullptr, nullptr, kDefaultStream), Error);
  AttentionParams odd_ranges = params;
  odd_ranges.range_keys = 48;  // not whole 32-key tiles
  EXPECT_THROW(sink_attention(odd_ranges, nullptr, nullptr, 1, nullptr, nullptr, kDefaultStream), Error);
  AttentionParams short_rows = params;
  short_rows.window_row_bytes = 64 * 4 - 1;
  EXPECT_THROW(sink_attention(short_rows, nullptr, nullptr, 1, nullptr, nullptr, kDefaultStream), Error);
  AttentionParams picked = params;
  picked.compressed = CompressedKeys::Picked;
  picked.ratio = 4;
  picked.entries = {8, 4, 0, 64 * 4, 64, RowFormat::F32};
  EXPECT_THROW(sink_attention(picked, nullptr, nullptr, 1, nullptr, nullptr, kDefaultStream), Error);  // no picks
  AttentionParams narrow_entries = picked;
  narrow_entries.compressed = CompressedKeys::Visible;
  narrow_entries.entries.width = 32;
  EXPECT_THROW(sink_attention(narrow_entries, nullptr, nullptr, 1, nullptr, nullptr, kDefaultStream), Error);
  synchronize();
}

}  // namespace
}  // namespace deepinfer::kernels::cuda

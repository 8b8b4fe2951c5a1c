// Engram::apply on a case computed by hand, and the FP8 row gather of the table.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>

#include "core/error.h"
#include "model/engram.h"

namespace deepinfer::model {
namespace {

template <typename T>
TensorView view_of(const std::vector<T>& data, DType dtype, std::vector<int64_t> shape) {
  return TensorView{dtype, std::move(shape),
                    std::span(reinterpret_cast<const std::byte*>(data.data()), data.size() * sizeof(T))};
}

// hidden 2, one stream, one 2-gram head over a 2-column F32 table; eps 0 so the numbers stay exact.
struct TinyEngram {
  std::vector<float> table{1, 0,    // row 0
                           -1, 0,   // row 1
                           0, 0};   // row 2
  // wkv [(hc + 1) * hidden, head_dim]: key = 2 * row, value = (row[0], -row[1]).
  std::vector<float> wkv{2, 0, 0, 2, 1, 0, 0, -1};
  ModelConfig config;

  TinyEngram() {
    config.hidden_size = 2;
    config.hc_mult = 1;
    config.rms_norm_eps = 0;
    config.engram.layer_ids = {0};
    config.engram.num_embeddings = {3};
    config.engram.max_ngram_size = 2;
    config.engram.vocab_size = 2;  // one bucket of prime 2: rows 0 and 1
    config.engram.n_heads = 1;
    config.engram.head_dim = 2;
    config.engram.pad_token_id = 0;
    config.engram.compressed_vocab_size = 1;
  }

  Engram make() const {
    kernels::WeightMatrix wkv_matrix;
    wkv_matrix.rows = 4;
    wkv_matrix.cols = 2;
    wkv_matrix.data = wkv.data();
    std::vector<EngramLayerWeights> layers;
    layers.push_back(EngramLayerWeights{EngramTable(view_of(table, DType::F32, {3, 2}), std::nullopt, "table"),
                                        wkv_matrix, {1, 1}, {0.5f, 3}});
    return Engram(config, EngramHasher(config.engram, CompressedTokenMap{{0}, 1}), std::move(layers));
  }
};

TEST(EngramApply, GatesTheValueIntoEachStream) {
  const TinyEngram tiny;
  const Engram engram = tiny.make();
  // token 0: h (3, 4), row 0 -> key (2, 0), value (1, 0): dot = 3 * 0.5 * 2 = 3, normalised
  //   3 / sqrt(12.5) / sqrt(2) / sqrt(2) = 0.424264, gate = sigmoid(sqrt(0.424264)) = 0.6573159.
  // token 1: same h, row 1 -> key (-2, 0), value (-1, 0): gate = sigmoid(-0.6513556) = 0.3426841.
  // token 2: h (0, 5) is orthogonal to key (2, 0): |dot| clamps to 1e-6, gate = sigmoid(1e-3).
  std::vector<float> streams{3, 4, 3, 4, 0, 5};
  const std::vector<int64_t> hash_ids{0, 1, 0};
  engram.apply(0, hash_ids, streams, 3);
  EXPECT_NEAR(streams[0], 3 + 0.6573158705, 1e-6);
  EXPECT_FLOAT_EQ(streams[1], 4);
  EXPECT_NEAR(streams[2], 3 - 0.3426841295, 1e-6);
  EXPECT_FLOAT_EQ(streams[3], 4);
  EXPECT_NEAR(streams[4], 0.5002500000, 1e-7);
  EXPECT_FLOAT_EQ(streams[5], 5);
}

TEST(EngramApply, RefusesBadShapesAndRows) {
  const TinyEngram tiny;
  const Engram engram = tiny.make();
  std::vector<float> streams{3, 4};
  EXPECT_THROW(engram.apply(1, std::vector<int64_t>{0}, streams, 1), Error);     // no such layer
  EXPECT_THROW(engram.apply(0, std::vector<int64_t>{0, 0}, streams, 1), Error);  // too many ids
  EXPECT_THROW(engram.apply(0, std::vector<int64_t>{3}, streams, 1), Error);     // row outside the table
}

TEST(EngramTable, GathersFp8RowsWithPerThirtyTwoColumnScales) {
  // Two rows of 64 e4m3 values: 0x38 = 1.0, 0x40 = 2.0, 0xB8 = -1.0; E8M0 scales 2^(b - 127).
  std::vector<uint8_t> weight(128, 0x38);
  weight[1] = 0x40;
  weight[64 + 40] = 0xB8;
  const std::vector<uint8_t> scale{128, 126, 127, 130};  // row 0: 2, 0.5; row 1: 1, 8
  const EngramTable table(view_of(weight, DType::F8_E4M3, {2, 64}), view_of(scale, DType::F8_E8M0, {2, 2}), "t");
  std::vector<float> row(64);
  table.gather(0, row.data());
  EXPECT_EQ(row[0], 2.0f);
  EXPECT_EQ(row[1], 4.0f);
  EXPECT_EQ(row[31], 2.0f);
  EXPECT_EQ(row[32], 0.5f);
  table.gather(1, row.data());
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_EQ(row[40], -8.0f);
  EXPECT_THROW(table.gather(2, row.data()), Error);
  EXPECT_THROW(EngramTable(view_of(weight, DType::F8_E4M3, {2, 64}), std::nullopt, "t"), Error);
}

// The reference multiplies by `scale` only for float8 tables: a float table's scale is ignored.
TEST(EngramTable, IgnoresTheScaleOfAFloatTable) {
  const std::vector<float> weight{1.5f, -2.0f};
  const std::vector<float> scale{4.0f};
  const EngramTable table(view_of(weight, DType::F32, {1, 2}), view_of(scale, DType::F32, {1, 1}), "t");
  std::vector<float> row(2);
  table.gather(0, row.data());
  EXPECT_EQ(row, weight);
}

}  // namespace
}  // namespace deepinfer::model

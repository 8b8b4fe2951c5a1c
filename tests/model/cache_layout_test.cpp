// Expected figures are derived by hand from docs/MODELS.md's state tables, layer by layer.
#include "model/cache_layout.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "io/model_config.h"

namespace deepinfer::model {
namespace {

ModelConfig config_named(const std::string& name) {
  return load_model_config(std::string(DEEPINFER_TEST_DATA_DIR) + "/configs/" + name);
}

// V4-Flash: 43 layers, 2 window-only, 21 CSA (ratio 4), 20 HCA (ratio 128), head_dim 512,
// index_head_dim 128, all f32. CSA entry 2048 + indexer key 512 per 4 tokens; HCA 2048 per 128.
TEST(CacheLayout, V4FlashFigures) {
  const CacheLayout layout = cache_layout(config_named("v4_flash.json"), 64);
  ASSERT_EQ(layout.layers.size(), 43u);
  EXPECT_DOUBLE_EQ(layout.bytes_per_token, 21 * (2048 + 512) / 4.0 + 20 * 2048 / 128.0);  // 13760
  // 64 tokens: 16 CSA entries, and one HCA entry slot although only every other block closes one.
  EXPECT_EQ(layout.block_bytes, 21 * 16 * 2560 + 20 * 1 * 2048);
  EXPECT_EQ(layout.window_bytes, 43 * 127 * 2048);
  // CSA rows: main kv + gate at 2 x 512, indexer at 2 x 128, f32; HCA: kv + gate at 512.
  const int64_t csa_row = 2 * 1024 * 4 + 2 * 256 * 4;
  const int64_t hca_row = 2 * 512 * 4;
  EXPECT_EQ(layout.compressor_tail_bytes, 21 * (3 + 4) * csa_row + 20 * 127 * hca_row);
  // At a multiple of 64: CSA's window just closed (its 4 overlap rows stay), HCA is half open.
  EXPECT_EQ(layout.boundary_compressor_tail_bytes, 21 * 4 * csa_row + 20 * 64 * hca_row);
  EXPECT_EQ(layout.engram_lookback_bytes, 0);
  EXPECT_EQ(layout.snapshot_bytes(), 43 * 127 * 2048 + 21 * 4 * csa_row + 20 * 64 * hca_row);
}

TEST(CacheLayout, V4FlashBlockOf128HasNoSlack) {
  const CacheLayout layout = cache_layout(config_named("v4_flash.json"), 128);
  EXPECT_EQ(layout.block_bytes, 128 * 13760);
  EXPECT_EQ(layout.boundary_compressor_tail_bytes, 21 * 4 * (2 * 1024 * 4 + 2 * 256 * 4));
}

// V4.1-Flash: kv sources 2, 8, 14 (ratio 2) and 20 (ratio 1); entries FP4 256 codes + 32 e4m3
// scales = 288 B, index keys FP4 64 + 4 ue8m0 = 68 B; window FP8 512 + 16 = 528 B, 40 layers.
TEST(CacheLayout, V41FlashFigures) {
  const CacheLayout layout = cache_layout(config_named("v41_flash.json"), 64);
  ASSERT_EQ(layout.layers.size(), 40u);
  EXPECT_DOUBLE_EQ(layout.bytes_per_token, 890.0);
  EXPECT_EQ(layout.block_bytes, 3 * 32 * 356 + 64 * 356);
  EXPECT_EQ(layout.window_bytes, 40 * 127 * 528);
  EXPECT_EQ(layout.compressor_tail_bytes, 3 * 1 * (2 * 512 * 4));  // one open row of a ratio-2 group
  EXPECT_EQ(layout.boundary_compressor_tail_bytes, 0);
  EXPECT_EQ(layout.engram_lookback_bytes, 3 * 8);
  int64_t owners = 0;
  for (const LayerCacheBytes& layer : layout.layers) owners += layer.entry_bytes > 0;
  EXPECT_EQ(owners, 4);
}

TEST(CacheLayout, OddBlockRoundsEntriesUpAndLeavesGroupsOpen) {
  const CacheLayout layout = cache_layout(config_named("v41_flash.json"), 3);
  EXPECT_EQ(layout.block_bytes, 3 * 2 * 356 + 3 * 356);
  EXPECT_EQ(layout.boundary_compressor_tail_bytes, 3 * 1 * (2 * 512 * 4));
}

// Each owning layer's entry and key regions follow each other and tile the block exactly.
TEST(CacheLayout, LayerRegionsTileTheBlock) {
  for (const char* name : {"v4_flash.json", "v41_flash.json"})
    for (int64_t block_tokens : {1, 3, 64, 128}) {
      const CacheLayout layout = cache_layout(config_named(name), block_tokens);
      int64_t next = 0;
      for (const LayerCacheBytes& layer : layout.layers) {
        if (layer.ratio == 0) {
          EXPECT_EQ(layer.entry_slots + layer.index_key_slots, 0);
          continue;
        }
        const int64_t slots = (block_tokens + layer.ratio - 1) / layer.ratio;
        EXPECT_EQ(layer.entry_offset, next) << name << " layer " << layer.layer;
        EXPECT_EQ(layer.entry_slots, slots);
        next += slots * layer.entry_bytes;
        EXPECT_EQ(layer.index_key_offset, next) << name << " layer " << layer.layer;
        EXPECT_EQ(layer.index_key_slots, layer.index_key_bytes > 0 ? slots : 0);
        next += layer.index_key_slots * layer.index_key_bytes;
      }
      EXPECT_EQ(next, layout.block_bytes) << name << " B = " << block_tokens;
    }
}

TEST(CacheLayout, RefusesEmptyBlocks) {
  EXPECT_THROW(cache_layout(config_named("v41_flash.json"), 0), Error);
}

}  // namespace
}  // namespace deepinfer::model

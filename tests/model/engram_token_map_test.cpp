// The compressed token map against the Hugging Face `tokenizers` library (npm 0.23.2): the
// fixture is the library's map of the V4.1 tokenizer asset (tools/engram/make_token_map.mjs),
// and each normalisation step against values the library gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "io/safetensors.h"
#include "io/tokenizer/tokenizer.h"
#include "model/engram_normalizer.h"
#include "model/engram_token_map.h"

namespace deepinfer::model {
namespace {

TEST(EngramNormalizer, FollowsTheLibrarySteps) {
  EXPECT_EQ(normalize_engram_key(" The"), "the");
  EXPECT_EQ(normalize_engram_key("THE  \t\n"), "the");
  EXPECT_EQ(normalize_engram_key("Caf\u00e9"), "cafe");           // NFD then StripAccents
  EXPECT_EQ(normalize_engram_key("a\u0903b"), "ab");              // Mc is stripped too
  EXPECT_EQ(normalize_engram_key("a\u20ddb"), "ab");              // and Me
  EXPECT_EQ(normalize_engram_key("\uff21\u00bd"), "a1\u20442");   // NFKC: fullwidth A, one half
  EXPECT_EQ(normalize_engram_key("\u1e9e\u03a3"), "\u00df\u03c3");  // per-character lowercase
  EXPECT_EQ(normalize_engram_key("a \t\r\n b"), "a b");           // one space per run
  EXPECT_EQ(normalize_engram_key(" "), " ");                      // a lone space survives Strip
  EXPECT_EQ(normalize_engram_key("\n\n"), " ");                   // so does a lone run
  EXPECT_EQ(normalize_engram_key("\u3000x\u00a0"), "x");          // Strip: Unicode White_Space
  EXPECT_EQ(normalize_engram_key("\u2003"), " ");                 // NFKC turns EM SPACE into " "
  EXPECT_EQ(normalize_engram_key("\u200b"), "\u200b");            // ZWSP is not White_Space
  EXPECT_EQ(normalize_engram_key(std::string("a\0b", 3)), std::string("a\0b", 3));
}

TEST(EngramTokenMap, EqualsTheLibraryMapOfTheV41Tokenizer) {
  const Tokenizer tokenizer = Tokenizer::from_file(DEEPINFER_ASSET_DIR "/tokenizer/deepseek_v41_tokenizer.json");
  const CompressedTokenMap map = build_compressed_token_map(tokenizer);
  ASSERT_EQ(map.compressed_ids.size(), tokenizer.vocab_size());

  const SafetensorsFile fixture = SafetensorsFile::open(DEEPINFER_TEST_DATA_DIR "/engram/token_map_v41.safetensors");
  const TensorView expected = fixture.view("token_map");
  ASSERT_EQ(expected.dtype, DType::I32);
  const int64_t common = expected.numel();
  // The library packs the asset's gapped added-token ids, so ids agree only below the first gap.
  ASSERT_GT(common, 128000);
  ASSERT_LE(common, static_cast<int64_t>(map.compressed_ids.size()));
  int64_t mismatches = 0;
  int64_t first_mismatch = -1;
  for (int64_t id = 0; id < common; ++id) {
    int32_t want = 0;
    std::memcpy(&want, expected.bytes.data() + id * 4, 4);
    if (map.compressed_ids[static_cast<std::size_t>(id)] != want) {
      if (first_mismatch < 0) first_mismatch = id;
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << "first at token id " << first_mismatch;
  int32_t largest = -1;
  for (int64_t id = 0; id < common; ++id) largest = std::max(largest, map.compressed_ids[static_cast<std::size_t>(id)]);
  EXPECT_EQ(std::to_string(largest + 1), fixture.metadata().at("compressed_size_of_prefix"));
  // Holes in the file's added-token ids take no compressed id, so the whole map has the size the
  // library (which packs added tokens) gives its whole vocabulary: the size the config must state.
  EXPECT_EQ(std::to_string(map.compressed_vocab_size), fixture.metadata().at("compressed_size_full"));
  EXPECT_EQ(map.compressed_ids[128815], kNoCompressedId);
  // Case, accents and leading space collapse; different words stay apart.
  const auto id_of = [&](const char* token) { return map.compressed_ids[static_cast<std::size_t>(*tokenizer.token_to_id(token))]; };
  EXPECT_EQ(id_of("The"), id_of("\u0120the"));
  EXPECT_NE(id_of("the"), id_of("a"));
}

}  // namespace
}  // namespace deepinfer::model

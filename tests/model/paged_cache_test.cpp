// The paged cache (paged_rows.h) and sequence snapshots (snapshot.cpp) on the tiny golden
// checkpoints: the logits do not depend on the block size or on who owns the blocks, a sequence
// rebuilt at a block boundary from copied blocks plus a snapshot continues bit for bit (also in
// the middle of an HCA window and of a V4.1 ratio-2 group, with Engram's look-back), and missing
// blocks or a bad snapshot are refused with an Error that leaves the sequence as it was.
#include <gtest/gtest.h>

#include <cstring>
#include <ostream>

#include "core/error.h"
#include "golden.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

struct Fixture {
  std::string family, name;
};
void PrintTo(const Fixture& fixture, std::ostream* out) { *out << fixture.family << "/" << fixture.name; }

const Model& load_paged_fixture(const Fixture& fixture) { return testing::shared_fixture(fixture.name, fixture.family); }

std::vector<int32_t> fixture_prompt(const Fixture& fixture) {
  return testing::Golden(fixture.name, fixture.family).ids("input_ids");
}

// Blocks the test owns, as an engine's pool would: `count` payloads of the layout's size.
struct Blocks {
  std::vector<std::vector<std::byte>> payloads;
  Blocks(int64_t count, int64_t bytes)
      : payloads(static_cast<std::size_t>(count), std::vector<std::byte>(static_cast<std::size_t>(bytes))) {}
  void map_into(SequenceState& sequence, int64_t first = 0) {
    for (std::size_t k = static_cast<std::size_t>(first); k < payloads.size(); ++k) {
      if (sequence.pages.blocks.size() <= k) sequence.pages.blocks.resize(k + 1, nullptr);
      sequence.pages.blocks[k] = payloads[k].data();
    }
  }
};

// ids[begin, end) through `sequence` in chunks of `chunk`; all logits rows.
std::vector<float> run(const Model& model, SequenceState& sequence, const std::vector<int32_t>& ids, std::size_t begin,
                       std::size_t end, std::size_t chunk) {
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  std::vector<float> logits((end - begin) * vocab);
  for (std::size_t at = begin; at < end; at += chunk) {
    const std::size_t count = std::min(chunk, end - at);
    model.forward(sequence, std::span(ids).subspan(at, count),
                  std::span(logits).subspan((at - begin) * vocab, count * vocab));
  }
  return logits;
}

bool same_bits(const float* a, const float* b, std::size_t count) {
  return std::memcmp(a, b, count * sizeof(float)) == 0;
}

class PagedCacheTest : public ::testing::TestWithParam<Fixture> {
 protected:
  const Model& model() const { return load_paged_fixture(GetParam()); }
  std::vector<int32_t> ids() const { return fixture_prompt(GetParam()); }
  std::vector<float> reference() const {
    SequenceState sequence = model().new_sequence();
    const auto all = ids();
    return run(model(), sequence, all, 0, all.size(), all.size());
  }
};

TEST_P(PagedCacheTest, LogitsDoNotDependOnBlockSizeOrOwnership) {
  const auto all = ids();
  const auto want = reference();
  for (int64_t block_tokens : {1, 3, 64, 128}) {
    SequenceState own = model().new_sequence(block_tokens, /*external_pages=*/false);
    const auto got = run(model(), own, all, 0, all.size(), 5);
    EXPECT_TRUE(same_bits(got.data(), want.data(), want.size())) << "self-owned, B = " << block_tokens;
    EXPECT_EQ(static_cast<int64_t>(own.pages.blocks.size()), Model::blocks_for(static_cast<int64_t>(all.size()), block_tokens));

    const CacheLayout layout = model().cache_layout(block_tokens);
    Blocks blocks(Model::blocks_for(static_cast<int64_t>(all.size()), block_tokens), layout.block_bytes);
    SequenceState external = model().new_sequence(block_tokens, /*external_pages=*/true);
    blocks.map_into(external);
    const auto external_got = run(model(), external, all, 0, all.size(), 7);
    EXPECT_TRUE(same_bits(external_got.data(), want.data(), want.size())) << "external, B = " << block_tokens;
    EXPECT_TRUE(external.pages.owned.empty());
    // The entries went into the caller's blocks, byte for byte as the self-owned ones hold them.
    for (std::size_t k = 0; k < blocks.payloads.size(); ++k)
      EXPECT_EQ(std::memcmp(blocks.payloads[k].data(), own.pages.blocks[k], blocks.payloads[k].size()), 0)
          << "B = " << block_tokens << " block " << k;
  }
}

TEST_P(PagedCacheTest, SnapshotAtABlockBoundaryResumesBitExactly) {
  const auto all = ids();
  const auto want = reference();
  const auto vocab = static_cast<std::size_t>(model().vocab_size());
  // B = 3 at 9 and B = 5 at 10: inside a window of every ratio (V4 4 and 8, V4.1 2).
  for (auto [block_tokens, boundary] : {std::pair<int64_t, int64_t>{3, 9}, {5, 10}, {4, 16}}) {
    ASSERT_LT(boundary, static_cast<int64_t>(all.size()));
    const CacheLayout layout = model().cache_layout(block_tokens);
    const int64_t total_blocks = Model::blocks_for(static_cast<int64_t>(all.size()), block_tokens);
    Blocks first(total_blocks, layout.block_bytes);
    SequenceState original = model().new_sequence(block_tokens, true);
    first.map_into(original);
    (void)run(model(), original, all, 0, static_cast<std::size_t>(boundary), 4);
    const std::vector<std::byte> snapshot = model().save_snapshot(original);

    // A new sequence: copies of the blocks before the boundary, fresh ones after it.
    Blocks second(total_blocks, layout.block_bytes);
    for (int64_t k = 0; k < boundary / block_tokens; ++k) second.payloads[k] = first.payloads[k];
    SequenceState resumed = model().new_sequence(block_tokens, true);
    second.map_into(resumed);
    model().restore_snapshot(resumed, snapshot);
    EXPECT_EQ(resumed.length, boundary);
    EXPECT_EQ(model().save_snapshot(resumed), snapshot);
    const auto rest = run(model(), resumed, all, static_cast<std::size_t>(boundary), all.size(), 3);
    EXPECT_TRUE(same_bits(rest.data(), want.data() + boundary * vocab, rest.size()))
        << "B = " << block_tokens << ", resumed at " << boundary;
  }
}

// At a boundary where every compressor window has just closed and the window is full, a snapshot
// is CacheLayout::snapshot_bytes() plus a fixed framing: magic, fingerprint (10 + 5 per layer
// values), length, look-back count, checksum, and per layer 18 counts.
TEST_P(PagedCacheTest, SnapshotSizeIsTheLayoutFigurePlusFraming) {
  const auto all = ids();
  const CacheLayout layout = model().cache_layout(8);
  SequenceState sequence = model().new_sequence(8, false);
  (void)run(model(), sequence, all, 0, 16, 16);
  const auto layers = static_cast<int64_t>(layout.layers.size());
  EXPECT_EQ(static_cast<int64_t>(model().save_snapshot(sequence).size()),
            layout.snapshot_bytes() + 8 * (1 + 1 + 10 + 5 * layers + 1 + 1 + 1) + 18 * 8 * layers);
}

// The engine reserves max_snapshot_bytes for a snapshot taken anywhere (a fork, a boundary).
TEST_P(PagedCacheTest, SnapshotsAtEveryPositionFitTheBound) {
  const auto all = ids();
  SequenceState sequence = model().new_sequence(8, false);
  for (std::size_t t = 0; t < all.size(); ++t) {
    (void)run(model(), sequence, all, t, t + 1, 1);
    EXPECT_LE(static_cast<int64_t>(model().save_snapshot(sequence).size()), model().max_snapshot_bytes(8)) << t + 1;
  }
}

TEST_P(PagedCacheTest, MissingBlockIsRefusedBeforeTheStateChanges) {
  const auto all = ids();
  const auto want = reference();
  const auto vocab = static_cast<std::size_t>(model().vocab_size());
  const int64_t block_tokens = 4;
  const CacheLayout layout = model().cache_layout(block_tokens);
  Blocks blocks(Model::blocks_for(static_cast<int64_t>(all.size()), block_tokens), layout.block_bytes);
  SequenceState sequence = model().new_sequence(block_tokens, true);
  std::vector<float> logits(vocab * 6);
  EXPECT_THROW(model().forward(sequence, std::span(all).first(6), logits), Error);  // empty table
  sequence.pages.blocks = {blocks.payloads[0].data(), nullptr};
  EXPECT_THROW(model().forward(sequence, std::span(all).first(6), logits), Error);  // null entry
  try {
    model().forward(sequence, std::span(all).first(6), logits);
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("cache block 1"), std::string::npos) << error.what();
  }
  EXPECT_EQ(sequence.length, 0);
  blocks.map_into(sequence);
  const auto got = run(model(), sequence, all, 0, all.size(), all.size());
  EXPECT_TRUE(same_bits(got.data(), want.data(), want.size()));
}

TEST_P(PagedCacheTest, BadSnapshotsAreRefusedAndLeaveTheSequenceAlone) {
  const auto all = ids();
  const int64_t block_tokens = 4;
  const CacheLayout layout = model().cache_layout(block_tokens);
  Blocks blocks(Model::blocks_for(static_cast<int64_t>(all.size()), block_tokens), layout.block_bytes);
  SequenceState original = model().new_sequence(block_tokens, true);
  blocks.map_into(original);
  (void)run(model(), original, all, 0, 8, 8);
  const std::vector<std::byte> snapshot = model().save_snapshot(original);

  SequenceState target = model().new_sequence(block_tokens, true);
  blocks.map_into(target);
  const auto refused = [&](std::span<const std::byte> bytes, SequenceState& into) {
    EXPECT_THROW(model().restore_snapshot(into, bytes), Error);
    EXPECT_EQ(into.length, 0);
  };
  refused(std::span(snapshot).first(snapshot.size() - 1), target);
  refused(std::span(snapshot).first(20), target);
  refused({}, target);
  for (std::size_t at : {std::size_t{3}, std::size_t{40}, snapshot.size() / 2, snapshot.size() - 1}) {
    std::vector<std::byte> corrupt = snapshot;
    corrupt[at] ^= std::byte{0x10};
    refused(corrupt, target);
  }
  SequenceState other_blocks = model().new_sequence(8, true);
  Blocks eight(2, model().cache_layout(8).block_bytes);
  eight.map_into(other_blocks);
  refused(snapshot, other_blocks);
  SequenceState no_blocks = model().new_sequence(block_tokens, true);
  refused(snapshot, no_blocks);
  // Another model's snapshot (the other family's fixture, same block size).
  const Fixture other = GetParam().family == "v4" ? Fixture{"v41", "tiny_fp8"} : Fixture{"v4", "tiny_fp8"};
  SequenceState foreign = load_paged_fixture(other).new_sequence(block_tokens, false);
  (void)run(load_paged_fixture(other), foreign, fixture_prompt(other), 0, 4, 4);
  refused(load_paged_fixture(other).save_snapshot(foreign), target);

  model().restore_snapshot(target, snapshot);  // the intact one still restores
  EXPECT_EQ(target.length, 8);
}

TEST_P(PagedCacheTest, SequencesMoveWithTheirPages) {
  const auto all = ids();
  const auto want = reference();
  SequenceState first = model().new_sequence(3, false);
  (void)run(model(), first, all, 0, 7, 7);
  SequenceState moved = std::move(first);
  SequenceState assigned;
  assigned = std::move(moved);
  const auto rest = run(model(), assigned, all, 7, all.size(), 2);
  EXPECT_TRUE(same_bits(rest.data(), want.data() + 7 * static_cast<std::size_t>(model().vocab_size()), rest.size()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PagedCacheTest,
                         ::testing::Values(Fixture{"v4", "tiny_fp8"}, Fixture{"v41", "tiny_fp8"}),
                         [](const auto& info) { return info.param.family + "_" + info.param.name; });

}  // namespace
}  // namespace deepinfer::model

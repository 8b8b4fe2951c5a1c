// The V4.1 forward pass against the transformers deepseek_v41 reference's outputs (golden fixtures
// tests/data/golden/v41/{tiny_bf16,tiny_fp8}, see their README): every position's logits of one
// prefill, the per-layer mHC streams, chunked prefill, cached greedy decode, the indexer's,
// candidate filter's and routers' choices, and Engram's hash tables, hash ids and token map.
// The fixtures carry no tokenizer.json: like the reference's bind_tokenizer, the V4.1 tokenizer
// asset is passed explicitly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "core/error.h"
#include "golden.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

using testing::Golden;
using testing::max_abs_diff;
using testing::run_chunked;

constexpr float kV41Tolerance = 1e-4f;

using testing::v41_tokenizer;
std::string v41_dir(const std::string& name) { return testing::fixture_dir(name, "v41"); }

const Model& load_v41_fixture(const std::string& name) { return testing::shared_fixture(name, "v41"); }

// `rows` of `width` from a -1 padded golden table, the padding dropped.
std::vector<std::vector<int64_t>> unpadded_rows(const std::vector<int64_t>& table, int64_t width) {
  std::vector<std::vector<int64_t>> rows(table.size() / static_cast<std::size_t>(width));
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (int64_t i = 0; i < width; ++i)
      if (int64_t value = table[r * static_cast<std::size_t>(width) + static_cast<std::size_t>(i)]; value >= 0)
        rows[r].push_back(value);
  return rows;
}

class V41GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  const Model& model() const { return load_v41_fixture(GetParam()); }
  Golden golden() const { return Golden(GetParam(), "v41"); }
};

TEST_P(V41GoldenTest, FullPrefillMatchesTheReference) {
  const Golden want = golden();
  const auto ids = want.ids("input_ids");
  const int64_t tokens = static_cast<int64_t>(ids.size());
  const int64_t vocab = model().vocab_size();
  const int64_t layers = model().config().num_layers;
  SequenceState sequence = model().new_sequence();
  std::vector<float> logits(static_cast<std::size_t>(tokens * vocab));
  ForwardTrace trace;
  model().forward(sequence, ids, logits, LogitRows::All, &trace);

  // Streams and final hidden first: they say where a logits mismatch starts.
  const auto streams = want.floats("layer_streams");
  ASSERT_EQ(trace.layer_streams.size(), streams.size());
  const int64_t per_layer = static_cast<int64_t>(streams.size()) / (tokens * layers);
  float stream_diff = 0;
  for (int64_t l = 0; l < layers; ++l) {
    float layer_diff = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      const std::size_t at = static_cast<std::size_t>((t * layers + l) * per_layer);
      layer_diff = std::max(layer_diff, max_abs_diff(trace.layer_streams.data() + at, streams.data() + at,
                                                     static_cast<std::size_t>(per_layer)));
    }
    std::printf("[ %s ] layer %lld: max |streams - golden| = %.3g\n", GetParam().c_str(), static_cast<long long>(l),
                layer_diff);
    stream_diff = std::max(stream_diff, layer_diff);
  }
  EXPECT_LE(stream_diff, kV41Tolerance);
  const auto final_hidden = want.floats("final_hidden");
  ASSERT_EQ(trace.final_hidden.size(), final_hidden.size());
  const float hidden_diff = max_abs_diff(trace.final_hidden.data(), final_hidden.data(), final_hidden.size());
  EXPECT_LE(hidden_diff, kV41Tolerance);
  const auto golden_logits = want.floats("logits");
  ASSERT_EQ(logits.size(), golden_logits.size());
  const float logit_diff = max_abs_diff(logits.data(), golden_logits.data(), logits.size());
  EXPECT_LE(logit_diff, kV41Tolerance);
  std::printf("[ %s ] max |logits - golden| = %.3g, |final_hidden - golden| = %.3g, |streams - golden| = %.3g\n",
              GetParam().c_str(), logit_diff, hidden_diff, stream_diff);

  // The kv sources' shared compressed KV and index keys after the prefill (post-RoPE, FP4).
  for (int64_t source : model().config().kv_source_layer_ids) {
    const CompressedGroupState& group = sequence.layers[source].group;
    for (const auto& [rows, name] : {std::pair{&group.entries, "csa_cache_kv_layer"}, {&group.index_keys, "csa_cache_index_k_layer"}}) {
      const std::string tensor = name + std::to_string(source);
      const auto cached = want.floats(tensor);
      ASSERT_EQ(rows->size(), want.shape(tensor)[0]) << tensor;
      ASSERT_EQ(rows->width(), want.shape(tensor)[1]) << tensor;
      std::vector<float> have(cached.size());
      for (int64_t r = 0; r < rows->size(); ++r) rows->read(r, have.data() + r * rows->width());
      const float diff = max_abs_diff(have.data(), cached.data(), cached.size());
      EXPECT_LE(diff, kV41Tolerance) << tensor;
      std::printf("[ %s ] max |%s - golden| = %.3g\n", GetParam().c_str(), tensor.c_str(), diff);
    }
  }

  // Index sources 2, 4, 6 in the golden; the trace holds every ratio > 0 layer's attended picks.
  const auto topk_shape = want.shape("indexer_topk");
  const auto golden_topk = unpadded_rows(want.integers("indexer_topk"), topk_shape[2]);
  const auto& index_sources = model().config().index_source_layer_ids;
  ASSERT_EQ(static_cast<int64_t>(index_sources.size()), topk_shape[1]);
  std::vector<int64_t> traced_layers;  // layer id of each trace.csa_topk entry
  for (int64_t l = 0; l < layers; ++l)
    if (model().config().compress_ratio(l) > 0) traced_layers.push_back(l);
  ASSERT_EQ(trace.csa_topk.size(), traced_layers.size());
  for (std::size_t s = 0; s < index_sources.size(); ++s) {
    const auto at = std::find(traced_layers.begin(), traced_layers.end(), index_sources[s]) - traced_layers.begin();
    ASSERT_LT(at, static_cast<std::ptrdiff_t>(traced_layers.size()));
    for (int64_t t = 0; t < tokens; ++t)
      EXPECT_EQ(trace.csa_topk[at][t], golden_topk[t * topk_shape[1] + s])
          << "index source layer " << index_sources[s] << ", token " << t;
  }

  const auto golden_blocks = unpadded_rows(want.integers("candidate_blocks"), want.shape("candidate_blocks")[1]);
  ASSERT_EQ(trace.candidate_blocks.size(), golden_blocks.size());
  for (int64_t t = 0; t < tokens; ++t) EXPECT_EQ(trace.candidate_blocks[t], golden_blocks[t]) << "token " << t;

  // Routed experts (ascending id) and their weights: [T, L, top_k].
  const auto experts = want.integers("moe_experts");
  const auto weights = want.floats("moe_weights");
  const int64_t top_k = model().config().num_experts_per_tok;
  float weight_diff = 0;
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t t = 0; t < tokens; ++t) {
      const Routing& routing = trace.routing[l][t];
      ASSERT_EQ(static_cast<int64_t>(routing.experts.size()), top_k);
      for (int64_t i = 0; i < top_k; ++i) {
        const std::size_t at = static_cast<std::size_t>((t * layers + l) * top_k + i);
        EXPECT_EQ(routing.experts[i], experts[at]) << "layer " << l << ", token " << t;
        weight_diff = std::max(weight_diff, std::abs(routing.weights[i] - weights[at]));
      }
    }
  EXPECT_LE(weight_diff, kV41Tolerance);
  std::printf("[ %s ] max |routed weights - golden| = %.3g\n", GetParam().c_str(), weight_diff);
}

TEST_P(V41GoldenTest, ChunkedPrefillMatchesTheReference) {
  const Golden want = golden();
  const auto ids = want.ids("input_ids");
  for (std::size_t chunk : {5, 13}) {
    const auto logits = run_chunked(model(), ids, chunk);
    const auto golden_logits = want.floats("chunked" + std::to_string(chunk) + "_logits");
    ASSERT_EQ(logits.size(), golden_logits.size());
    const float diff = max_abs_diff(logits.data(), golden_logits.data(), logits.size());
    EXPECT_LE(diff, kV41Tolerance) << "chunk " << chunk;
    std::printf("[ %s ] chunks of %zu: max |logits - golden| = %.3g\n", GetParam().c_str(), chunk, diff);
  }
}

TEST_P(V41GoldenTest, GreedyDecodeMatchesTheReference) {
  const Golden want = golden();
  const auto prompt = want.ids("greedy_prompt_ids");
  const auto want_ids = want.integers("greedy_ids");
  const auto want_logits = want.floats("greedy_logits");
  const int64_t vocab = model().vocab_size();
  SequenceState sequence = model().new_sequence();
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  model().forward(sequence, prompt, logits, LogitRows::Last);
  float worst = 0;
  for (std::size_t step = 0; step < want_ids.size(); ++step) {
    worst = std::max(worst, max_abs_diff(logits.data(), want_logits.data() + step * vocab, static_cast<std::size_t>(vocab)));
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(next, want_ids[step]) << "greedy step " << step << " (max logits diff so far " << worst << ")";
    const int32_t token[] = {next};
    model().forward(sequence, token, logits, LogitRows::Last);
  }
  EXPECT_LE(worst, kV41Tolerance);
  std::printf("[ %s ] greedy decode: max |logits - golden| = %.3g\n", GetParam().c_str(), worst);
}

TEST_P(V41GoldenTest, EngramTablesAndHashIdsMatchTheReference) {
  const Golden want = golden();
  const Engram* engram = model().engram();
  ASSERT_NE(engram, nullptr);
  const EngramHasher& hasher = engram->hasher();
  EXPECT_EQ(hasher.token_map().compressed_vocab_size, want.integers("engram_compressed_vocab_size")[0]);
  const auto multipliers = hasher.multipliers();
  EXPECT_EQ(std::vector<int64_t>(multipliers.begin(), multipliers.end()), want.integers("engram_multipliers"));
  EXPECT_EQ(hasher.layout().primes, want.integers("engram_primes"));
  EXPECT_EQ(hasher.layout().offsets, want.integers("engram_offsets"));

  // In chunks of 5, so the look-back across calls is exercised too.
  const auto ids = want.ids("input_ids");
  EngramHashState state = engram->new_state();
  std::vector<int64_t> hash_ids;
  for (std::size_t begin = 0; begin < ids.size(); begin += 5) {
    const auto part = engram->hash(state, std::span(ids).subspan(begin, std::min<std::size_t>(5, ids.size() - begin)));
    hash_ids.insert(hash_ids.end(), part.begin(), part.end());
  }
  EXPECT_EQ(hash_ids, want.integers("engram_hash_ids"));
}

INSTANTIATE_TEST_SUITE_P(V41Golden, V41GoldenTest, ::testing::Values("tiny_bf16", "tiny_fp8"));

// The reference's compressed token map (decode, normalise, number keys by first appearance) over
// every id of the V4.1 tokenizer asset. The asset's added-token ids have holes (128815..128820,
// 128823, ...); the Hugging Face library renumbers its added tokens without holes (<think>, file id
// 128821, becomes 128815), so the reference's map is indexed by those packed ids, while the engine
// keeps the file's ids (the ones the model's embedding rows follow) and gives holes no compressed
// id. With the holes dropped, the engine's map must be the reference's entry for entry.
TEST(V41GoldenTokenMapTest, EqualsTheReferenceMapWithTheFileHolesDropped) {
  const Engram* engram = load_v41_fixture("tiny_bf16").engram();
  ASSERT_NE(engram, nullptr);
  const auto want = Golden("tiny_bf16", "v41").int32s("engram_token_map");
  std::vector<int32_t> packed;
  for (int32_t id : engram->hasher().token_map().compressed_ids)
    if (id != kNoCompressedId) packed.push_back(id);
  ASSERT_EQ(packed.size(), want.size());
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (packed[i] != want[i] && mismatches++ == 0) first = i;
  EXPECT_EQ(mismatches, 0u) << "first mismatch at packed id " << first << ": " << packed[first] << " vs " << want[first];
  // Where the file has no holes (everything below its first hole), the ids themselves agree.
  EXPECT_EQ(engram->hasher().token_map().compressed_ids[128814], want[128814]);
  EXPECT_EQ(engram->hasher().token_map().compressed_ids[128815], kNoCompressedId);
}

TEST(V41GoldenLoadTest, AnEngramFixtureWithoutATokenizerNamesBothPlaces) {
  const std::string dir = v41_dir("tiny_bf16");
  try {
    (void)Model::load(dir);
    FAIL() << "loaded an Engram model without a tokenizer";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(dir + "/tokenizer.json"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("LoadOptions::tokenizer"), std::string::npos) << error.what();
  }
  const std::string missing = dir + "/no-such-tokenizer.json";
  try {
    (void)Model::load(dir, LoadOptions{.tokenizer = missing});
    FAIL() << "loaded an Engram model with a missing tokenizer";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(missing), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(dir + "/tokenizer.json"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace deepinfer::model

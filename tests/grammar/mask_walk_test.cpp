// The automaton mask walk (grammar/mask_walk.h) against the reference Earley walk: the plain-text
// slice automaton against UTF-8 itself, the vocabulary's slice levels against its tries, strings
// whose length is bounded (the slice levels below the whole slice), the walk that gives up past
// its memory bound, and a differential run over the JSONSchemaBench dev split: valid instances
// token by token with random detours and rollbacks, every compared mask equal to the walked one.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/compile_util.h"
#include "grammar/earley.h"
#include "grammar/mask_walk.h"
#include "grammar/text_slice.h"
#include "io/tokenizer/tokenizer.h"
#include "mask_checks.h"
#include "sanitizer_scale.h"

namespace deepinfer::grammar {
namespace {

using testing::deepseek_vocabulary;
using testing::draw;

int run_slice(std::string_view bytes) {
  int state = text_slice::kStart;
  for (char c : bytes) {
    state = text_slice::next(state, static_cast<uint8_t>(c));
    if (state == text_slice::kDead) break;
  }
  return state;
}

TEST(TextSlice, TakesExactlyTheCharactersAStringHoldsUnescaped) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string bytes;
    detail::append_utf8(bytes, cp);
    const bool plain = cp >= 0x20 && cp != '"' && cp != '\\' && cp != 0x7F;
    ASSERT_EQ(run_slice(bytes) == text_slice::kStart, plain) << "U+" << std::hex << cp;
    if (!plain) continue;
    for (std::size_t n = 1; n < bytes.size(); ++n)  // inside the character: alive, not between characters
      ASSERT_GT(run_slice(bytes.substr(0, n)), text_slice::kStart) << "U+" << std::hex << cp;
  }
  // Not UTF-8: surrogates, overlong forms, past U+10FFFF, stray continuation and invalid bytes.
  for (const char* bad : {"\xED\xA0\x80", "\xED\xBF\xBF", "\xC0\xAF", "\xC1\xBF", "\xE0\x9F\xBF", "\xF0\x8F\xBF\xBF",
                          "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\x80", "\xBF", "\xFF", "a\xC3\xC3"})
    EXPECT_EQ(run_slice(bad), text_slice::kDead) << bad;
}

TEST(TextSlice, LevelsPartitionTheVocabularyWithTheirTries) {
  const Vocabulary& vocabulary = *deepseek_vocabulary();
  std::vector<char> in_trie(static_cast<std::size_t>(vocabulary.size()));
  // A trie's tokens, each checked to spell its path (the bytes of the nodes at each depth).
  const auto trie_tokens = [&](int level) {
    std::fill(in_trie.begin(), in_trie.end(), 0);
    std::string path;
    for (const Vocabulary::Node& node : vocabulary.trie(level).subspan(1)) {
      path.resize(node.depth - std::size_t{1});
      path += static_cast<char>(node.byte);
      for (int32_t id : vocabulary.tokens_at(node)) {
        ASSERT_EQ(vocabulary.bytes(id), path) << "token " << id << " at level " << level;
        in_trie[static_cast<std::size_t>(id)] = 1;
      }
    }
  };
  trie_tokens(0);
  const std::vector<char> whole = in_trie;
  int64_t previous = 0;
  for (int level = 0; level <= text_slice::kLevels; ++level) {
    trie_tokens(level);
    const std::span<const uint64_t> slice = vocabulary.slice_tokens(level);
    int64_t count = 0;
    for (int32_t id = 0; id < vocabulary.size(); ++id) {
      const bool sliced = (slice[static_cast<std::size_t>(id) / 64] >> (id % 64)) & 1;
      const std::string& bytes = vocabulary.bytes(id);
      ASSERT_EQ(sliced || in_trie[static_cast<std::size_t>(id)], whole[static_cast<std::size_t>(id)] != 0) << id;
      ASSERT_FALSE(sliced && in_trie[static_cast<std::size_t>(id)]) << "token " << id << " in both at level " << level;
      if (!sliced) continue;
      ++count;
      EXPECT_LE(bytes.size(), text_slice::kLevelBytes[static_cast<std::size_t>(level)]) << id;
      EXPECT_NE(run_slice(bytes), text_slice::kDead) << id;
    }
    EXPECT_GE(count, previous) << "levels nest";
    previous = count;
  }
  EXPECT_GT(previous, vocabulary.size() * 9 / 10) << "most of the vocabulary is plain text";
}

// Random walks through strings whose length is bounded (and keys, enums, formats beside them):
// each step's cached mask (the automaton walk on a miss) equal to the reference walk.
TEST(MaskWalk, BoundedStringsEqualTheReference) {
  const std::vector<std::string> schemas = {
      R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 12},
          "b": {"type": "string", "minLength": 20}, "c": {"type": "string", "minLength": 2, "maxLength": 40}},
          "required": ["a", "b", "c"]})",
      R"({"type": "object", "patternProperties": {"^[0-9a-zA-Z_-]{1,255}$": {"type": ["number", "string"]}},
          "additionalProperties": false})",
      R"({"type": "array", "items": {"type": "string", "pattern": "^[^\"]{3,9}$"}})",
      R"({"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
          "kind": {"enum": ["first", "firstly", "second"]}, "note": {"type": "string"}}})",
  };
  const auto& vocabulary = deepseek_vocabulary();
  std::vector<uint64_t> cached(static_cast<std::size_t>((vocabulary->size() + 63) / 64)), walked(cached.size());
  std::mt19937 rng(5);
  bool bounded_level_met = false;
  for (const std::string& text : schemas) {
    const auto grammar = prepare(compile_json_schema(nlohmann::ordered_json::parse(text), {}));
    for (int walk = 0; walk < deepinfer::testing::release_or_sanitized(4, 1); ++walk) {
      Matcher matcher(grammar, vocabulary);
      for (int step = 0; step < 24 && !matcher.finished(); ++step) {
        matcher.fill_mask(cached);
        matcher.fill_mask(walked, /*cached=*/false);
        ASSERT_EQ(cached, walked) << text << ": walk " << walk << ", step " << step;
        const int32_t id = draw(walked, rng);
        if (id < 0) break;
        ASSERT_TRUE(matcher.accept_token(id));
      }
    }
    const KeyAutomaton& automaton = grammar->automaton();
    for (int32_t state = 0; state < automaton.state_count(); ++state) {
      const int8_t level = automaton.slice_level(state);
      bounded_level_met = bounded_level_met || (level > 0 && level < text_slice::kLevels);
    }
  }
  EXPECT_TRUE(bounded_level_met) << "no state took a slice level short of the whole slice";
}

TEST(MaskWalk, GivesUpPastItsMemoryBound) {
  const auto grammar = prepare(compile_json_schema(nlohmann::ordered_json::parse(R"({"type": "object"})"), {}));
  const auto& vocabulary = deepseek_vocabulary();
  Chart chart(*grammar);
  for (char c : std::string_view(R"({"a": "x)")) ASSERT_TRUE(chart.advance(static_cast<uint8_t>(c)));
  const std::size_t columns = chart.columns.size();
  std::string key;
  chart.mask_key(key);
  std::vector<uint64_t> tiny(static_cast<std::size_t>((vocabulary->size() + 63) / 64)), roomy(tiny.size()),
      reference(tiny.size());
  KeyAutomaton small(grammar->class_count(), /*max_bytes=*/1);
  walk_automaton(chart, small, *vocabulary, key, tiny);
  EXPECT_EQ(small.bytes(), 0u) << "the walk that gave up dropped its automaton";
  KeyAutomaton large(grammar->class_count());
  walk_automaton(chart, large, *vocabulary, key, roomy);
  EXPECT_GT(large.bytes(), 0u);
  walk_reference(chart, *vocabulary, reference);
  EXPECT_EQ(tiny, reference);
  EXPECT_EQ(roomy, reference);
  EXPECT_EQ(chart.columns.size(), columns) << "the walks left the chart where it was";
}

// Every 15th dev schema: its first valid instance token by token, the mask compared with the
// reference at each of the first steps and every fourth one after; at every sixth step a detour
// through a random allowed token (its mask compared), then a rollback, after which the mask is the
// one before the detour. (The reference walk is the slow part: ~25 ms a mask inside a string.)
// Under AddressSanitizer (CI's -O1 instrumented run of the unit suites) every 300th: the release
// run covers the sample, this one looks for memory errors, and the whole sample took 7 minutes.
constexpr int kSchemaStride = deepinfer::testing::release_or_sanitized(15, 300);

TEST(MaskWalk, DevSchemasEqualTheReference) {
  const std::filesystem::path path =
      std::filesystem::path(DEEPINFER_ASSET_DIR) / ".." / ".." / "shared" / "structured" / "jsonschemabench_dev.jsonl.xz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not in this checkout";
  const Tokenizer tokenizer =
      Tokenizer::from_file(std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json");
  const auto& vocabulary = deepseek_vocabulary();
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(("xz -dc '" + path.string() + "'").c_str(), "r"), pclose);
  ASSERT_TRUE(pipe) << "cannot run xz";
  std::vector<uint64_t> cached(static_cast<std::size_t>((vocabulary->size() + 63) / 64)), walked(cached.size()),
      before(cached.size());
  std::mt19937 rng(23);
  int64_t compared = 0, schemas = 0;
  std::string line;
  char buffer[1 << 16];
  for (int index = 0;; ++index) {
    line.clear();
    while (fgets(buffer, sizeof buffer, pipe.get())) {
      line += buffer;
      if (line.back() == '\n') break;
    }
    if (line.empty()) break;
    if (index % kSchemaStride != 0) continue;
    const nlohmann::ordered_json record = nlohmann::ordered_json::parse(line);
    std::shared_ptr<const CompiledGrammar> grammar;
    try {
      grammar = prepare(compile_json_schema(record["schema"], {}));
    } catch (const CompileError&) {
      continue;
    }
    ++schemas;
    const std::string id = record["id"];
    for (const auto& test : record["tests"]) {
      if (!test["valid"].get<bool>()) continue;
      Matcher matcher(grammar, vocabulary);
      const std::vector<int32_t> tokens = tokenizer.encode_plain(test["data"].dump());
      for (std::size_t step = 0; step <= tokens.size(); ++step) {
        matcher.fill_mask(cached);
        if (step < 6 || step % 4 == 0 || step == tokens.size()) {
          matcher.fill_mask(walked, /*cached=*/false);
          ASSERT_EQ(cached, walked) << id << ": step " << step;
          ++compared;
        }
        if (step % 6 == 1) {
          before = cached;
          const int32_t detour = draw(cached, rng);
          ASSERT_GE(detour, 0) << id << ": nothing allowed at step " << step;
          ASSERT_TRUE(matcher.accept_token(detour)) << id << ": the mask allowed " << detour;
          matcher.fill_mask(cached);
          matcher.fill_mask(walked, /*cached=*/false);
          ASSERT_EQ(cached, walked) << id << ": after detour token " << detour << " at step " << step;
          matcher.rollback(1);
          matcher.fill_mask(cached);
          ASSERT_EQ(cached, before) << id << ": the mask after a rollback, step " << step;
          compared += 2;
        }
        if (step == tokens.size()) {
          EXPECT_TRUE(matcher.accepting()) << id;
          break;
        }
        ASSERT_TRUE((cached[static_cast<std::size_t>(tokens[step]) / 64] >> (tokens[step] % 64)) & 1)
            << id << ": the instance's token " << step << " is masked out";
        ASSERT_TRUE(matcher.accept_token(tokens[step])) << id;
      }
      break;  // one instance a schema
    }
  }
  // The sample was walked (every 15th: 30 schemas and 500 masks at least; fewer under ASan).
  EXPECT_GT(schemas, 30 * 15 / kSchemaStride);
  EXPECT_GT(compared, 500 * 15 / kSchemaStride);
}

}  // namespace
}  // namespace deepinfer::grammar

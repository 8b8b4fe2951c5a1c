// The grammar's mask cache (Matcher::fill_mask, keyed by the part of the chart later bytes can
// reach, chains of tail items collapsed) against the plain trie walk, over the DeepSeek-V4.1
// vocabulary: random walks through JSON schemas (free and pattern strings, free keys beside
// patternProperties, arrays, recursion, anyOf), each step's cached mask equal to the walked one, with several matchers of one
// grammar sharing the cache (so a later walk meets states an earlier one stored), and the cache
// actually hit.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/earley.h"
#include "grammar/matcher.h"
#include "mask_checks.h"
#include "sanitizer_scale.h"

namespace deepinfer::grammar {
namespace {

using testing::deepseek_vocabulary;
using testing::draw;

// Steps a walk: half under the sanitizers (sanitizer_scale.h), where this test took 29 s.
constexpr int kWalkSteps = deepinfer::testing::release_or_sanitized(16, 8);

TEST(MaskCache, CachedMasksEqualTheWalk) {
  const std::vector<std::string> schemas = {
      R"({"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array",
          "items": {"type": "string", "maxLength": 6}}, "n": {"type": "integer", "minimum": 3}},
          "required": ["name", "tags"], "additionalProperties": false})",
      R"({"type": "array", "items": {"enum": ["red", "green", 7, null]}, "maxItems": 5})",
      R"({"type": "object", "properties": {"id": {"type": "string", "pattern": "^[a-f0-9]{4}-[0-9]+$"},
          "child": {"$ref": "#"}}, "additionalProperties": false})",
      R"({"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "number"}},
          "properties": {"kind": {"const": "a"}}, "additionalProperties": {"type": "array",
          "items": {"type": "object", "properties": {"v": {"type": "string", "format": "date"}}}}})",
      R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}, "required": ["a"]},
          {"type": "array", "items": {"type": "integer", "maximum": 40}}]})",
  };
  const auto& vocabulary = deepseek_vocabulary();
  std::vector<uint64_t> cached(static_cast<std::size_t>((vocabulary->size() + 63) / 64)), walked(cached.size());
  std::mt19937 rng(11);
  int64_t steps = 0, hits = 0;
  for (const std::string& text : schemas) {
    const auto grammar = prepare(compile_json_schema(nlohmann::ordered_json::parse(text), {}));
    for (int walk = 0; walk < 3; ++walk) {
      Matcher matcher(grammar, vocabulary);
      std::mt19937 path(static_cast<uint32_t>(walk) * 7 + 1);  // walks 1 and 2 repeat walk 0's start
      for (int step = 0; step < kWalkSteps && !matcher.finished(); ++step) {
        matcher.fill_mask(cached);
        matcher.fill_mask(walked, /*cached=*/false);
        ASSERT_EQ(cached, walked) << text << ": walk " << walk << ", step " << step;
        ++steps;
        const int32_t id = draw(walked, step < 4 ? path : rng);
        if (id < 0) break;
        ASSERT_TRUE(matcher.accept_token(id)) << "the mask allowed token " << id;
      }
      if (walk == 2) hits += matcher.mask_cache_stats().hits;
    }
  }
  EXPECT_GT(steps, 60 * kWalkSteps / 16);
  EXPECT_GT(hits, 0) << "the cache was never hit";
  // A free string: every character after the first leaves the chart as it was (left-recursive
  // characters), so its masks after the first are copies.
  const auto grammar = prepare(compile_json_schema(nlohmann::ordered_json::parse(R"({"type": "string"})"), {}));
  Matcher matcher(grammar, vocabulary);
  ASSERT_TRUE(matcher.accept_bytes("\"a"));
  matcher.fill_mask(cached);
  for (const char* more : {"b", "cd", " e", "fgh"}) {
    ASSERT_TRUE(matcher.accept_bytes(more));
    matcher.fill_mask(cached);
    matcher.fill_mask(walked, /*cached=*/false);
    EXPECT_EQ(cached, walked);
  }
  EXPECT_EQ(matcher.mask_cache_stats().misses, 1);
  EXPECT_EQ(matcher.mask_cache_stats().hits, 4);
}

// A bounded string's body is a rule per count of characters left (Grammar::Counted); counts past
// the vocabulary's longest token (128 bytes here) are one in the cache's key, so the masks of a
// long bounded string are shared until its end comes within a token's reach, and every one
// still equals the walk: checked at the start, across the edges of the shared stretch (counts
// 129 and 128 left of the maximum, and of the minimum), and at the end.
TEST(MaskCache, PositionsFarFromABoundShareAMask) {
  const auto& vocabulary = deepseek_vocabulary();
  ASSERT_EQ(vocabulary->max_token_length(), 128u);
  const auto grammar = prepare(
      compile_json_schema(nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"s": {"type": "string",
          "minLength": 150, "maxLength": 300}}, "required": ["s"], "additionalProperties": false})"), {}));
  const auto aliases = grammar->mask_aliases(vocabulary->max_token_length());
  ASSERT_NE(aliases, nullptr);
  Matcher matcher(grammar, vocabulary);
  std::vector<uint64_t> cached(static_cast<std::size_t>((vocabulary->size() + 63) / 64)), walked(cached.size());
  ASSERT_TRUE(matcher.accept_bytes("{\"s\": \""));
  const auto checked = [](int n) {  // characters so far
    return n <= 2 || (n >= 19 && n <= 24) || (n >= 168 && n <= 174) || n >= 297;
  };
  int64_t misses_inside = 0;
  for (int n = 0; n <= 300; ++n) {
    if (n > 0) ASSERT_TRUE(matcher.accept_bytes("x")) << n;
    const int64_t misses = matcher.mask_cache_stats().misses;
    matcher.fill_mask(cached);
    if (n >= 2 && n <= 20) misses_inside += matcher.mask_cache_stats().misses - misses;
    if (!checked(n) || (deepinfer::testing::kUnderSanitizer && n % 4 != 0)) continue;
    matcher.fill_mask(walked, /*cached=*/false);
    ASSERT_EQ(cached, walked) << n << " characters in";
  }
  EXPECT_EQ(misses_inside, 0) << "masks 2..20 characters in (both bounds past 128 characters) were not shared";
  ASSERT_TRUE(matcher.accept_bytes("\"}"));
  EXPECT_TRUE(matcher.accepting());
}

}  // namespace
}  // namespace deepinfer::grammar

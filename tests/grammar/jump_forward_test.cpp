// Jump-forward tokens (grammar/jump_forward.h): the tokenizer's encoding of the forced bytes, cut
// to what the grammar accepts, to max_tokens and before a stop token, to whole UTF-8 characters,
// and without a last token the grammar lets the model write as part of a longer one; on the
// DeepSeek tokenizer, a schema's fixed keys come out as the tokenizer's own encoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/jump_forward.h"
#include "grammar/matcher.h"
#include "io/tokenizer/tokenizer.h"
#include "mask_checks.h"

namespace deepinfer::grammar {
namespace {

constexpr int32_t kEos = 0;
constexpr int32_t kSpecial = 1;

// Single bytes for every printable ASCII character, and a few longer tokens.
struct SmallVocabulary {
  std::vector<std::string> bytes;
  std::shared_ptr<const Vocabulary> vocabulary;

  explicit SmallVocabulary(const std::vector<std::string>& longer) {
    bytes = {"", "<special>"};
    for (int c = 0x20; c < 0x7f; ++c) bytes.emplace_back(1, static_cast<char>(c));
    bytes.insert(bytes.end(), longer.begin(), longer.end());
    vocabulary = std::make_shared<const Vocabulary>(bytes, std::vector<int32_t>{kSpecial}, kEos);
  }
  int32_t id(const std::string& text) const {
    return static_cast<int32_t>(std::find(bytes.begin(), bytes.end(), text) - bytes.begin());
  }
  // Greedy longest match, as a stand-in tokenizer; "<special>" is the special token's spelling.
  TextEncoder encoder() const {
    return [this](std::string_view text) {
      std::vector<int32_t> out;
      while (!text.empty()) {
        std::size_t best = 0;
        int32_t best_id = -1;
        for (std::size_t i = 1; i < bytes.size(); ++i)
          if (bytes[i].size() > best && text.substr(0, bytes[i].size()) == bytes[i]) {
            best = bytes[i].size();
            best_id = static_cast<int32_t>(i);
          }
        if (best_id < 0) return out;
        out.push_back(best_id);
        text.remove_prefix(best);
      }
      return out;
    };
  }
};

std::string text_of(const SmallVocabulary& v, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += v.bytes[static_cast<std::size_t>(id)];
  return out;
}

TEST(JumpForward, ForcedBytesBecomeTheEncodersTokensAndTheMatcherTakesThem) {
  const SmallVocabulary v({"abc", "de"});
  Matcher matcher(prepare(compile_regex("abcdef(x|y)")), v.vocabulary);
  const std::vector<int32_t> tokens = jump_forward(matcher, *v.vocabulary, v.encoder(), 100);
  // "abcdef" is forced: "abc" "de" "f" (no longer token starts with "f", so the last stays).
  EXPECT_EQ(tokens, (std::vector<int32_t>{v.id("abc"), v.id("de"), v.id("f")}));
  EXPECT_TRUE(matcher.accept_bytes("x"));
  EXPECT_TRUE(matcher.accepting());
}

TEST(JumpForward, TheLastTokenIsLeftWhenTheGrammarAllowsALongerOneThere) {
  // "ab" is forced, then "c" or "d": the model may write "abc" in one token, which the grammar
  // allows, so the run's only token "ab" is left to the sampler.
  const SmallVocabulary v({"ab", "abc"});
  Matcher matcher(prepare(compile_regex("ab(c|d)")), v.vocabulary);
  EXPECT_TRUE(jump_forward(matcher, *v.vocabulary, v.encoder(), 100).empty());
  EXPECT_TRUE(matcher.accept_bytes("ab"));  // unchanged: still at the start

  // When the only longer token ("abd") is one the grammar rules out, "ab" stays.
  const SmallVocabulary w({"ab", "abd"});
  Matcher other(prepare(compile_regex("ab(c|e)")), w.vocabulary);
  EXPECT_EQ(jump_forward(other, *w.vocabulary, w.encoder(), 100), std::vector<int32_t>{w.id("ab")});
}

TEST(JumpForward, StopsAtMaxTokensAStopTokenAndASpecialToken) {
  const SmallVocabulary v({});
  {
    Matcher matcher(prepare(compile_regex("hello(x|y)")), v.vocabulary);
    const std::vector<int32_t> tokens = jump_forward(matcher, *v.vocabulary, v.encoder(), 3);
    EXPECT_EQ(text_of(v, tokens), "hel");
    EXPECT_TRUE(matcher.accept_bytes("lox"));
  }
  {
    Matcher matcher(prepare(compile_regex("hello(x|y)")), v.vocabulary);
    const std::vector<int32_t> stops{v.id("l")};
    EXPECT_EQ(text_of(v, jump_forward(matcher, *v.vocabulary, v.encoder(), 100, stops)), "he");
  }
  {
    // The encoder spells "<special>" as the special token, which grammar text never matches.
    Matcher matcher(prepare(compile_regex("ab<special>c(x|y)")), v.vocabulary);
    EXPECT_EQ(text_of(v, jump_forward(matcher, *v.vocabulary, v.encoder(), 100)), "ab");
  }
  {
    Matcher matcher(prepare(compile_regex("hello")), v.vocabulary);
    EXPECT_TRUE(jump_forward(matcher, *v.vocabulary, TextEncoder{}, 100).empty());  // no encoder
    EXPECT_TRUE(jump_forward(matcher, *v.vocabulary, v.encoder(), 0).empty());
  }
}

TEST(JumpForward, ForcedBytesEndingInsideACharacterAreCutBeforeIt) {
  // "é" is C3 A9 and "è" C3 A8: after "x", only C3 is forced, which is not text on its own.
  const SmallVocabulary v({"\xC3\xA9", "\xC3\xA8"});
  Matcher matcher(prepare(compile_regex("x(\xC3\xA9|\xC3\xA8)")), v.vocabulary);
  EXPECT_EQ(text_of(v, jump_forward(matcher, *v.vocabulary, v.encoder(), 100)), "x");
  // A whole forced character is kept.
  Matcher whole(prepare(compile_regex("\xC3\xA9(a|b)")), v.vocabulary);
  EXPECT_EQ(text_of(v, jump_forward(whole, *v.vocabulary, v.encoder(), 100)), "\xC3\xA9");
}

TEST(JumpForward, NothingIsForcedWhereTheGrammarBranchesOrIsComplete) {
  const SmallVocabulary v({});
  Matcher branches(prepare(compile_regex("(a|b)c")), v.vocabulary);
  EXPECT_TRUE(jump_forward(branches, *v.vocabulary, v.encoder(), 100).empty());
  Matcher complete(prepare(compile_regex("ab")), v.vocabulary);
  ASSERT_TRUE(complete.accept_bytes("ab"));
  EXPECT_TRUE(jump_forward(complete, *v.vocabulary, v.encoder(), 100).empty());
}

// A schema whose keys are fixed: after the opening, each key's forced bytes come out as the
// DeepSeek tokenizer's encoding of them (a prefix of it, without a last token a longer allowed
// token extends), and the matcher accepts them.
TEST(JumpForward, FixedKeysComeOutAsTheTokenizersEncoding) {
  const Tokenizer tokenizer =
      Tokenizer::from_file(std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json");
  const std::shared_ptr<const Vocabulary>& vocabulary = testing::deepseek_vocabulary();
  const TextEncoder encode = [&](std::string_view text) { return tokenizer.encode(text); };
  const auto schema = nlohmann::ordered_json::parse(R"({
    "type": "object", "additionalProperties": false,
    "properties": {"customer_information_record": {"type": "object", "additionalProperties": false,
      "properties": {"shipping_address_line": {"type": "boolean"}},
      "required": ["shipping_address_line"]}},
    "required": ["customer_information_record"]})");
  JsonSchemaOptions options;
  options.max_whitespace = 0;  // compact: every key and colon is forced
  Matcher matcher(prepare(compile_json_schema(schema, options)), vocabulary);
  const std::vector<int32_t> tokens = jump_forward(matcher, *vocabulary, encode, 100);
  const std::string forced = tokenizer.decode(tokens);
  const std::string instance = R"({"customer_information_record":{"shipping_address_line":true}})";
  // Both keys are forced (the value is a choice): the run covers the first one at least.
  EXPECT_EQ(instance.rfind(forced, 0), 0u) << forced;
  EXPECT_GT(forced.size(), std::string(R"({"customer_information_record")").size()) << forced;
  EXPECT_EQ(tokens, std::vector<int32_t>(tokenizer.encode(forced)));
  EXPECT_TRUE(matcher.accept_bytes(instance.substr(forced.size())));
  EXPECT_TRUE(matcher.accepting());
}

}  // namespace
}  // namespace deepinfer::grammar

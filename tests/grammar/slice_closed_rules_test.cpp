// Which rules take the whole plain-text slice on their own (grammar/slice_closed_rules.h): a
// right-linear spelling of JSON string text that never ends takes it, one that ends after 30
// characters or lacks one kind of UTF-8 character does not; and at the keys of an object with
// many property names the mask walk's shortcut gives the reference walk's masks, with every key
// allowed and with only the names.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/earley.h"
#include "grammar/slice_closed_rules.h"
#include "mask_checks.h"

namespace deepinfer::grammar {
namespace {

using testing::deepseek_vocabulary;

// String text as right-linear rules, `characters` characters long then a closing quote (-1: any
// length): text[i] reads the i-th character's first byte, and a multi-byte character's other
// bytes go through continuation rules to text[i + 1]. `with_ed`: whether characters led by 0xED
// (U+D000-U+D7FF) are there. Returns text[0].
RuleId add_slice_text(Grammar& g, int characters, bool with_ed) {
  const int rules = characters < 0 ? 1 : characters + 1;
  std::vector<RuleId> text;
  for (int i = 0; i < rules; ++i) text.push_back(g.add_rule("text" + std::to_string(i)));
  const Symbol quote = g.terminal(ByteSet::of('"'));
  for (int i = 0; i < rules; ++i) {
    g.add_alternative(text[static_cast<std::size_t>(i)], {quote});
    if (i + 1 == rules && characters >= 0) continue;  // the last one only closes
    const Symbol next = Grammar::rule(text[static_cast<std::size_t>(characters < 0 ? 0 : i + 1)]);
    // A continuation byte in [first, last] then `then`.
    const auto continuation = [&](uint8_t first, uint8_t last, Symbol then) {
      const RuleId r = g.add_rule("cont");
      g.add_alternative(r, {g.terminal(ByteSet::range(first, last)), then});
      return Grammar::rule(r);
    };
    const Symbol one = continuation(0x80, 0xBF, next);
    const Symbol two = continuation(0x80, 0xBF, one);
    ByteSet ascii = ByteSet::range(0x20, 0x7E);
    ascii.words['"' >> 6] &= ~(uint64_t{1} << ('"' & 63));
    ascii.words['\\' >> 6] &= ~(uint64_t{1} << ('\\' & 63));
    const RuleId at = text[static_cast<std::size_t>(i)];
    g.add_alternative(at, {g.terminal(ascii), next});
    g.add_alternative(at, {g.terminal(ByteSet::range(0xC2, 0xDF)), one});
    ByteSet three = ByteSet::range(0xE1, 0xEC);
    three.add_range(0xEE, 0xEF);
    g.add_alternative(at, {g.terminal(three), two});
    g.add_alternative(at, {g.terminal(ByteSet::of(0xE0)), continuation(0xA0, 0xBF, one)});
    if (with_ed) g.add_alternative(at, {g.terminal(ByteSet::of(0xED)), continuation(0x80, 0x9F, one)});
    g.add_alternative(at, {g.terminal(ByteSet::range(0xF1, 0xF3)), continuation(0x80, 0xBF, two)});
    g.add_alternative(at, {g.terminal(ByteSet::of(0xF0)), continuation(0x90, 0xBF, two)});
    g.add_alternative(at, {g.terminal(ByteSet::of(0xF4)), continuation(0x80, 0x8F, two)});
  }
  return text[0];
}

// A JSON string of that text: `"` then text[0].
struct SliceTextGrammar {
  std::shared_ptr<const CompiledGrammar> compiled;
  RuleId root, text;
};

SliceTextGrammar slice_text_grammar(int characters, bool with_ed) {
  Grammar g;
  const RuleId text = add_slice_text(g, characters, with_ed);
  const RuleId root = g.add_rule("root");
  g.add_alternative(root, {g.terminal(ByteSet::of('"')), Grammar::rule(text)});
  g.set_start(root);
  return {prepare(std::move(g)), root, text};
}

TEST(SliceClosedRules, TextThatNeverEndsTakesTheSlice) {
  const SliceTextGrammar g = slice_text_grammar(-1, true);
  SliceClosedRules rules(*g.compiled);
  EXPECT_TRUE(rules.closed(g.text));
  EXPECT_FALSE(rules.closed(g.root)) << "the root reads a quote first, outside the slice";
}

TEST(SliceClosedRules, TextThatEndsAfterThirtyCharactersDoesNot) {
  // Every slice path of up to 30 characters lives (more than the 16 bytes the chart's bounded
  // check looks at): the 31st character dies.
  const SliceTextGrammar g = slice_text_grammar(30, true);
  SliceClosedRules rules(*g.compiled);
  EXPECT_FALSE(rules.closed(g.text));
}

TEST(SliceClosedRules, TextWithoutOneKindOfCharacterDoesNot) {
  const SliceTextGrammar g = slice_text_grammar(-1, /*with_ed=*/false);
  SliceClosedRules rules(*g.compiled);
  EXPECT_FALSE(rules.closed(g.text));
}

// Whether a rule the chart's last column predicted takes the slice (the mask walk's shortcut).
bool last_column_takes_slice(const Chart& chart) {
  for (const RuleId rule : chart.columns.back().predicted)
    if (chart.grammar.slice_closed_rules().closed(rule)) return true;
  return false;
}

TEST(SliceClosedRules, KeysOfAnObjectWithManyNamesGiveTheReferenceMasks) {
  nlohmann::ordered_json properties = nlohmann::ordered_json::object();
  for (int i = 0; i < 40; ++i) properties["property_" + std::to_string(i * 7919 % 1000)] = {{"type", "integer"}};
  const auto& vocabulary = deepseek_vocabulary();
  std::vector<uint64_t> cached(static_cast<std::size_t>((vocabulary->size() + 63) / 64)), walked(cached.size());
  for (const bool others : {true, false}) {
    nlohmann::ordered_json schema = {{"type", "object"}, {"properties", properties}};
    if (!others) schema["additionalProperties"] = false;
    const auto grammar = prepare(compile_json_schema(schema, {}));
    for (const std::string prefix : {R"({")", R"({"prop)", R"({"property_)", R"({"property_0":3,")"}) {
      Matcher matcher(grammar, vocabulary);
      ASSERT_TRUE(matcher.accept_bytes(prefix)) << prefix;
      Chart chart(*grammar);
      for (const char c : prefix) ASSERT_TRUE(chart.advance(static_cast<uint8_t>(c)));
      EXPECT_EQ(last_column_takes_slice(chart), others) << prefix << (others ? " (any key)" : " (only the names)");
      matcher.fill_mask(cached);
      matcher.fill_mask(walked, /*cached=*/false);
      EXPECT_EQ(cached, walked) << prefix << (others ? " (any key)" : " (only the names)");
    }
  }
}

}  // namespace
}  // namespace deepinfer::grammar

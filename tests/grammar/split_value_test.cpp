// The pieces the DSML tool-call grammar (api/tool_call_grammar.h) is composed of: a subschema's
// values split into raw strings and other JSON (compile_json_schema_split), JSON whose strings
// avoid a text (JsonSchemaOptions::excluded_text), free text without a marker (text_without), and
// grammars included into another (Grammar::include).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/grammar.h"
#include "grammar/json_schema_dfa.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar {
namespace {

using ojson = nlohmann::ordered_json;

SplitValueGrammars split(const std::string& document, const std::string& pointer, const std::string& excluded = "") {
  JsonSchemaOptions options;
  options.excluded_text = excluded;
  return compile_json_schema_split(ojson::parse(document), pointer, options);
}

TEST(SplitValue, AStringSchemaIsRawStringsOnly) {
  const SplitValueGrammars values = split(R"({"type": "string", "minLength": 1, "maxLength": 3})", "");
  ASSERT_TRUE(values.raw_string);
  EXPECT_FALSE(values.json_other);
  EXPECT_TRUE(matches(*values.raw_string, "abc"));
  EXPECT_TRUE(matches(*values.raw_string, "a\"\n"));  // raw: a quote and a newline are themselves
  EXPECT_TRUE(matches(*values.raw_string, "\xC3\xA9t\xC3\xA9"));  // three code points
  EXPECT_FALSE(matches(*values.raw_string, ""));
  EXPECT_FALSE(matches(*values.raw_string, "abcd"));
  EXPECT_FALSE(matches(*values.raw_string, "\"ab\""));  // not JSON text
  EXPECT_FALSE(matches(*values.raw_string, "\xFF"));    // not UTF-8
}

TEST(SplitValue, AMixedSchemaSplitsByType) {
  const SplitValueGrammars values = split(R"({"type": ["string", "integer", "null"], "pattern": "^x+$"})", "");
  ASSERT_TRUE(values.raw_string);
  ASSERT_TRUE(values.json_other);
  EXPECT_TRUE(matches(*values.raw_string, "xx"));
  EXPECT_FALSE(matches(*values.raw_string, "y"));
  EXPECT_TRUE(matches(*values.json_other, "12"));
  EXPECT_TRUE(matches(*values.json_other, "null"));
  EXPECT_FALSE(matches(*values.json_other, "\"xx\""));  // strings go raw
  EXPECT_FALSE(matches(*values.json_other, "1.5"));
}

TEST(SplitValue, EnumsSplitByTheirValuesTypes) {
  const SplitValueGrammars values = split(R"({"enum": ["a", 1, [true]]})", "");
  ASSERT_TRUE(values.raw_string);
  ASSERT_TRUE(values.json_other);
  EXPECT_TRUE(matches(*values.raw_string, "a"));
  EXPECT_FALSE(matches(*values.raw_string, "1"));
  EXPECT_TRUE(matches(*values.json_other, "1"));
  EXPECT_TRUE(matches(*values.json_other, "[true]"));
  EXPECT_FALSE(matches(*values.json_other, "\"a\""));
}

TEST(SplitValue, RefsResolveAgainstTheWholeDocument) {
  const std::string document =
      R"({"$defs": {"n": {"type": "integer", "minimum": 2}}, "properties": {"a/b": {"$ref": "#/$defs/n"}, "f": false}})";
  const SplitValueGrammars values = split(document, "/properties/a~1b");
  EXPECT_FALSE(values.raw_string);
  ASSERT_TRUE(values.json_other);
  EXPECT_TRUE(matches(*values.json_other, "3"));
  EXPECT_FALSE(matches(*values.json_other, "1"));
  const SplitValueGrammars nothing = split(document, "/properties/f");
  EXPECT_FALSE(nothing.raw_string);
  EXPECT_FALSE(nothing.json_other);
  try {
    split(document, "/properties/missing");
    ADD_FAILURE() << "compiled a missing subschema";
  } catch (const CompileError& error) {
    EXPECT_EQ(error.where(), "/properties/missing");
  }
  try {
    split(R"({"properties": {"u": {"type": "array", "uniqueItems": true}}})", "/properties/u");
    ADD_FAILURE() << "compiled uniqueItems";
  } catch (const CompileError& error) {
    EXPECT_EQ(error.where(), "/properties/u/uniqueItems");
  }
}

TEST(SplitValue, TheExcludedTextAppearsInNoStringRawOrJson) {
  const SplitValueGrammars values = split(R"({"type": ["string", "array"], "items": {"type": "string"}})", "", "</x");
  ASSERT_TRUE(values.raw_string);
  ASSERT_TRUE(values.json_other);
  EXPECT_TRUE(matches(*values.raw_string, "a</b <x /x"));
  EXPECT_FALSE(matches(*values.raw_string, "a</xb"));
  EXPECT_FALSE(matches(*values.raw_string, "</x"));
  EXPECT_TRUE(matches(*values.json_other, R"(["a</b"])"));
  EXPECT_FALSE(matches(*values.json_other, R"(["a</x"])"));
  // Keys, enum words, patterns and free values alike.
  JsonSchemaOptions options;
  options.excluded_text = "</x";
  const Grammar free = any_json(/*object_only=*/false, options);
  EXPECT_TRUE(matches(free, R"({"k": ["v", 1]})"));
  EXPECT_FALSE(matches(free, R"({"</x": 1})"));
  EXPECT_FALSE(matches(free, R"({"k": "</x"})"));
  const Grammar words = compile_json_schema(ojson::parse(R"({"enum": ["ok", "no</x"]})"), options);
  EXPECT_TRUE(matches(words, R"("ok")"));
  EXPECT_FALSE(matches(words, R"("no</x")"));
  const Grammar bounded = compile_json_schema(ojson::parse(R"({"type": "string", "maxLength": 5})"), options);
  EXPECT_TRUE(matches(bounded, R"("a</b")"));
  EXPECT_FALSE(matches(bounded, R"("a</x")"));
}

// A length bound beside the excluded text costs a chain of counts, not an automaton of every
// partial character at every count: long bounds compile, and stay exact.
TEST(SplitValue, LongLengthBoundsBesideTheExcludedTextStayExact) {
  const std::string marker = "</\xEF\xBD\x9C" "DSML\xEF\xBD\x9C";  // </｜DSML｜
  const SplitValueGrammars values = split(R"({"type": "string", "minLength": 2, "maxLength": 3000})", "", marker);
  ASSERT_TRUE(values.raw_string);
  EXPECT_LT(values.raw_string->size(), 300000);
  EXPECT_TRUE(matches(*values.raw_string, std::string(3000, 'a')));
  EXPECT_FALSE(matches(*values.raw_string, std::string(3001, 'a')));
  EXPECT_FALSE(matches(*values.raw_string, "a"));
  EXPECT_TRUE(matches(*values.raw_string, "</\xEF\xBD\x9C" "DSM </\xEF\xBD\x9C" "DSMX"));  // near misses
  EXPECT_FALSE(matches(*values.raw_string, std::string(1500, 'a') + marker + "b"));
  EXPECT_FALSE(matches(*values.raw_string, "<" + marker));  // a match that starts inside a partial one

  JsonSchemaOptions options;
  options.excluded_text = marker;
  const Grammar json = compile_json_schema(ojson::parse(R"({"type": "string", "maxLength": 5000})"), options);
  EXPECT_TRUE(matches(json, "\"" + std::string(5000, 'x') + "\""));
  EXPECT_FALSE(matches(json, "\"" + std::string(5001, 'x') + "\""));
  EXPECT_FALSE(matches(json, "\"a" + marker + "\""));
  // Escapes never spell the marker's bytes, so the value may still hold its text.
  EXPECT_TRUE(matches(json, "\"\\u003c/\xEF\xBD\x9C" "DSML\xEF\xBD\x9C\""));
  EXPECT_TRUE(matches(json, "\"<\\/\xEF\xBD\x9C" "DSML\xEF\xBD\x9C\""));
  const Grammar at_least = compile_json_schema(ojson::parse(R"({"type": "string", "minLength": 3})"), options);
  EXPECT_TRUE(matches(at_least, "\"abcdef\""));
  EXPECT_FALSE(matches(at_least, "\"ab\""));
  EXPECT_FALSE(matches(at_least, "\"abc" + marker + "\""));
}

TEST(TextWithout, AnyUtf8TextButTheMarker) {
  const Grammar text = text_without("<\xEF\xBD\x9C" "DSML\xEF\xBD\x9C");  // <｜DSML｜
  EXPECT_TRUE(matches(text, ""));
  EXPECT_TRUE(matches(text, "plain text, <b>tags</b> and \xEF\xBD\x9C"));
  EXPECT_TRUE(matches(text, "<\xEF\xBD\x9C" "DSM"));  // a prefix is still text
  EXPECT_FALSE(matches(text, "a <\xEF\xBD\x9C" "DSML\xEF\xBD\x9C calls>"));
  EXPECT_FALSE(matches(text, "\xC3"));  // a cut character
  const Grammar no_quote = text_without("\"");
  EXPECT_TRUE(matches(no_quote, "name"));
  EXPECT_FALSE(matches(no_quote, "na\"me"));
}

TEST(ContainingDfa, MatchesTextsWithTheNeedleAnywhere) {
  const schema::Dfa dfa = schema::containing("abab");
  EXPECT_TRUE(dfa.matches("abab"));
  EXPECT_TRUE(dfa.matches("xxabababyy"));
  EXPECT_TRUE(dfa.matches("aabab"));
  EXPECT_FALSE(dfa.matches("abaab"));
  EXPECT_FALSE(dfa.matches(""));
}

TEST(GrammarInclude, AComposedGrammarMatchesThePartsInSequence) {
  Grammar outer;
  const RuleId number = outer.include(compile_regex("[0-9]+"));
  const RuleId word = outer.include(compile_regex("[a-z]+"));
  const RuleId start = outer.add_rule("pair");
  Sequence sequence{Grammar::rule(number)};
  for (const Symbol& s : outer.literal("=")) sequence.push_back(s);
  sequence.push_back(Grammar::rule(word));
  outer.add_alternative(start, sequence);
  outer.set_start(start);
  outer.validate();
  EXPECT_TRUE(matches(outer, "12=ab"));
  EXPECT_FALSE(matches(outer, "ab=12"));
  EXPECT_FALSE(matches(outer, "12"));
}

}  // namespace
}  // namespace deepinfer::grammar

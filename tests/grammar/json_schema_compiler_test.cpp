// The JSON Schema compiler: every keyword's accepted and rejected instances (compact and
// pretty-printed), the refusals with their JSON pointers, the limits, the automata underneath
// (json_schema_dfa.h); and JSONSchemaBench's dev split (../shared/structured), where every valid
// instance of a compiled schema must be accepted and every invalid one rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/grammar.h"
#include "grammar/json_schema_dfa.h"
#include "grammar/json_schema_internal.h"
#include "grammar/matcher.h"
#include "json_text_checks.h"
#include "sanitizer_scale.h"

namespace deepinfer::grammar {
namespace {

using ojson = nlohmann::ordered_json;

Grammar compile(const std::string& schema, const JsonSchemaOptions& options = {}, const CompileLimits& limits = {}) {
  return compile_json_schema(ojson::parse(schema), options, limits);
}

// The text without whitespace between tokens.
std::string minified(const std::string& text) {
  std::string out;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
      out += c;
    } else if (c != ' ' && c != '\n' && c != '\t' && c != '\r') {
      out += c;
    }
  }
  return out;
}

using testing::longest_whitespace_run;

// Each `yes` text is accepted, and so are its compact and pretty-printed forms where those
// re-serialise the same value the same way (and the indentation fits max_whitespace); each `no`
// text is rejected.
void check_schema(const std::string& schema, const std::vector<std::string>& yes, const std::vector<std::string>& no,
           const JsonSchemaOptions& options = {}) {
  SCOPED_TRACE("schema: " + schema);
  Grammar g;
  try {
    g = compile(schema, options);
  } catch (const CompileError& e) {
    ADD_FAILURE() << "refused: " << e.what();
    return;
  }
  for (const std::string& text : yes) {
    EXPECT_TRUE(matches(g, text)) << "should accept " << text;
    ojson parsed = ojson::parse(text, nullptr, false);
    if (!parsed.is_discarded() && parsed.dump() == minified(text)) {
      EXPECT_TRUE(matches(g, parsed.dump())) << "should accept compact " << parsed.dump();
      if (longest_whitespace_run(parsed.dump(2)) <= static_cast<std::size_t>(options.max_whitespace)) {
        EXPECT_TRUE(matches(g, parsed.dump(2))) << "should accept pretty " << parsed.dump(2);
      }
    }
  }
  for (const std::string& text : no) EXPECT_FALSE(matches(g, text)) << "should reject " << text;
}

// The schema is refused at `where`, the message containing `reason`.
void refused_schema(const std::string& schema, const std::string& where, const std::string& reason,
             const JsonSchemaOptions& options = {}, const CompileLimits& limits = {}) {
  SCOPED_TRACE("schema: " + schema);
  try {
    compile(schema, options, limits);
    ADD_FAILURE() << "compiled, expected a refusal at " << where;
  } catch (const CompileError& e) {
    if (where != "*") {
      EXPECT_EQ(e.where(), where) << e.what();
    }
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

JsonSchemaOptions lenient() {
  JsonSchemaOptions o;
  o.lenient = true;
  return o;
}

// ---- values and whitespace ----------------------------------------------------------------

TEST(JsonSchemaCompiler, TrueSchemaIsAnyJsonValue) {
  check_schema("true", {"1", "-0.5e+3", "\"x\"", "null", "true", "[]", "{}", "[1,[2,{\"a\":null}]]", "{\"a\":{\"b\":[]}}"},
        {"", "nul", "01", "1.", ".5", "+1", "[1,]", "{\"a\"}", "{a:1}", "'x'", "[1 2]", "{\"a\":1,}", "\"\\x\""});
  check_schema("{}", {"{\"k\":[true,false]}"}, {"[", "}"});
}

TEST(JsonSchemaCompiler, FalseSchemaIsRefusedAtTheRootAndRejectsInside) {
  refused_schema("false", "", "accepts no JSON value");
  check_schema(R"({"properties": {"a": false}})", {"{}", "{\"b\":1}"}, {"{\"a\":1}", "{\"a\":null}"});
}

TEST(JsonSchemaCompiler, WhitespaceIsBoundedAndAllowedBetweenTokens) {
  check_schema(R"({"type": "object"})", {"{}", " { } ", "{\n\t\"a\" :\r [ 1 , 2 ] }"}, {});
  JsonSchemaOptions tight;
  tight.max_whitespace = 2;
  check_schema(R"({"type": "array"})", {"[  1,  2]", "  [1]  "}, {"[   1]", "[1]   ", "[1,\n\n\n2]"}, tight);
  JsonSchemaOptions none;
  none.max_whitespace = 0;
  check_schema(R"({"type": "array"})", {"[1,2]"}, {"[1, 2]", " [1]"}, none);
}

TEST(JsonSchemaCompiler, Types) {
  check_schema(R"({"type": "null"})", {"null"}, {"0", "\"null\"", "false"});
  check_schema(R"({"type": "boolean"})", {"true", "false"}, {"0", "null", "\"true\""});
  // Integers may be written n.0 (an integer from draft 6 on), not in draft 4.
  check_schema(R"({"type": "integer"})", {"0", "-0", "7", "-12", "123456789012345678901234567890", "1.0", "-3.00"},
        {"1.5", "1.01", "1e2", "01", "-", "1.", "\"1\""});
  check_schema(R"({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"})", {"7"}, {"1.0"});
  check_schema(R"({"type": "number"})", {"0", "1.5", "-0.25", "1e5", "2E-3", "1.5e+10"}, {".5", "1.", "--1", "0x10", "NaN", "Infinity"});
  check_schema(R"({"type": "string"})", {"\"\"", "\"abc\""}, {"abc", "'a'", "1"});
  check_schema(R"({"type": ["string", "null"]})", {"\"a\"", "null"}, {"1", "{}"});
  check_schema(R"({"type": "array"})", {"[]", "[1,\"a\"]"}, {"{}"});
  check_schema(R"({"type": "object"})", {"{}", "{\"a\":1}"}, {"[]"});
  refused_schema(R"({"type": "any"})", "/type", "unknown type");
}

TEST(JsonSchemaCompiler, StringEscapesAndUtf8) {
  check_schema(R"({"type": "string"})",
        {R"("a\"b")", R"("\\")", R"("\/")", R"("\b\f\n\r\t")", R"("\u00e9\u00E9")", R"("\ud83d\ude00")", "\"\xC3\xA9\"",
         "\"\xF0\x9F\x98\x80\"", "\"\x7F\""},
        {"\"\\x\"", "\"\\u12\"", "\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83d\\u0041\"", "\"a\nb\"", "\"\x01\"", "\"\xC0\x80\"",
         "\"\xED\xA0\x80\"", "\"\xF4\x90\x80\x80\"", "\"\xC3\"", "\"\xFF\""});
}

TEST(JsonSchemaCompiler, LengthsCountCodePoints) {
  check_schema(R"({"type": "string", "minLength": 2, "maxLength": 3})",
        {"\"ab\"", "\"abc\"", "\"\xC3\xA9\xC3\xA9\"", "\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\"", R"("\ud83d\ude00\u00e9")", R"("a\n")"},
        {"\"a\"", "\"abcd\"", "\"\xF0\x9F\x98\x80\"", R"("\ud83d\ude00")", "\"\""});
  check_schema(R"({"maxLength": 0})", {"\"\"", "12", "[]"}, {"\"a\""});
}

// ---- pattern and format -----------------------------------------------------------------------

TEST(JsonSchemaCompiler, PatternSearchesUnlessAnchored) {
  check_schema(R"({"type": "string", "pattern": "b+c"})", {"\"abbcd\"", "\"bc\""}, {"\"ac\"", "\"\""});
  check_schema(R"({"type": "string", "pattern": "^[a-z]{2,3}$"})", {"\"ab\"", "\"abc\""}, {"\"a\"", "\"abcd\"", "\"aB\"", "\"ab\\n\""});
  check_schema(R"({"type": "string", "pattern": "^a|b$"})", {"\"ax\"", "\"xb\""}, {"\"xa\"", "\"bx\""});
  check_schema(R"({"pattern": "^x"})", {"1", "null", "\"xy\""}, {"\"yx\""});  // only strings are constrained
}

TEST(JsonSchemaCompiler, PatternsSeeDecodedCharacters) {
  check_schema(R"({"type": "string", "pattern": "^a\"b/c$"})", {R"("a\"b/c")", R"("a\"b\/c")"}, {R"("a\\"b/c")", R"("a\"b\\c")"});
  check_schema(R"({"type": "string", "pattern": "^\\n\\t$"})", {R"("\n\t")", R"("\u000a\u0009")"}, {R"("nt")", R"("\\n\\t")"});
}

TEST(JsonSchemaCompiler, PatternClassesTakeTheNarrowerReading) {
  // \d and \w are ASCII (ECMAScript); their complements exclude what Python's Unicode classes
  // include, so neither validator disagrees with an accepted string.
  check_schema(R"({"type": "string", "pattern": "^\\d+$"})", {"\"0123\""}, {"\"\xD9\xA3\"", "\"1a\""});  // U+0663
  check_schema(R"({"type": "string", "pattern": "^\\D+$"})", {"\"ab-\"", "\"\xC3\xA9\""}, {"\"\xD9\xA3\"", "\"a1\""});
  check_schema(R"({"type": "string", "pattern": "^\\W$"})", {"\"-\""}, {"\"\xC3\xA9\"", "\"a\""});
  check_schema(R"({"type": "string", "pattern": "^[^a]$"})", {"\"b\"", "\"\xC3\xA9\""}, {"\"a\"", "\"\\n\\n\""});
  check_schema(R"({"type": "string", "pattern": "^.$"})", {"\"\xF0\x9F\x98\x80\"", "\"x\""}, {"\"\\n\"", "\"\\r\"", "\"ab\""});
}

TEST(JsonSchemaCompiler, PatternWithLengthIsTheIntersection) {
  check_schema(R"({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3, "minLength": 2})", {"\"ab\"", "\"abc\""},
        {"\"a\"", "\"abcd\"", "\"A1\""});
}

TEST(JsonSchemaCompiler, UnsupportedPatternsAreRefusedWithTheirPointer) {
  refused_schema(R"js({"properties": {"a": {"pattern": "^(?!x)"}}})js", "/properties/a/pattern", "lookaround");
  refused_schema(R"({"pattern": "(a)\\1"})", "/pattern", "backreferences");
  refused_schema(R"({"pattern": "\\bword"})", "/pattern", "word boundaries");
  refused_schema(R"({"pattern": "[a"})", "/pattern", "without ']'");
  refused_schema(R"({"patternProperties": {"(": {}}})", "/patternProperties/(", "without ')'");
}

TEST(JsonSchemaCompiler, Formats) {
  check_schema(R"({"format": "date"})", {"\"2024-02-29\"", "\"2000-02-29\"", "\"1999-12-31\"", "\"0001-01-01\"", "7"},
        {"\"2023-02-29\"", "\"1900-02-29\"", "\"2023-04-31\"", "\"2023-13-01\"", "\"0000-01-01\"", "\"2023-1-01\""});
  check_schema(R"({"format": "time"})", {"\"23:59:59Z\"", "\"08:30:00.123+02:00\"", "\"00:00:00-11:30\""},
        {"\"24:00:00Z\"", "\"12:00:00\"", "\"12:60:00Z\"", "\"23:59:60Z\"", "\"12:00:00z\""});
  check_schema(R"({"format": "date-time"})", {"\"2024-01-31T10:20:30Z\"", "\"2024-01-31T10:20:30.5+05:30\""},
        {"\"2024-01-31 10:20:30Z\"", "\"2024-01-32T10:20:30Z\"", "\"2024-01-31T10:20Z\""});
  check_schema(R"({"format": "uuid"})", {"\"123e4567-e89b-12d3-a456-426614174000\"", "\"123E4567-E89B-12D3-A456-426614174000\""},
        {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400\"", "\"g23e4567-e89b-12d3-a456-426614174000\""});
  check_schema(R"({"format": "ipv4"})", {"\"0.0.0.0\"", "\"192.168.1.255\""}, {"\"256.1.1.1\"", "\"01.1.1.1\"", "\"1.1.1\"", "\"1.1.1.1.1\""});
  check_schema(R"({"format": "ipv6"})",
        {"\"::\"", "\"::1\"", "\"1::\"", "\"2001:db8::8a2e:370:7334\"", "\"2001:0db8:0000:0000:0000:ff00:0042:8329\"",
         "\"::ffff:192.0.2.128\"", "\"1:2:3:4:5:6:7:8\""},
        {"\"1:2:3:4:5:6:7:8:9\"", "\"1::2::3\"", "\"12345::\"", "\":1\"", "\"1:2:3:4:5:6:7::8\"", "\"::ffff:999.0.2.128\""});
  check_schema(R"({"format": "email"})", {"\"a.b+c@example.com\"", "\"x@sub.example.co.uk\""},
        {"\"a@b\"", "\"a..b@example.com\"", "\"@example.com\"", "\"a@-x.com\"", "\"a b@example.com\""});
  check_schema(R"({"format": "hostname"})", {"\"example.com\"", "\"localhost\"", "\"a-b.c\""}, {"\"-a.com\"", "\"a..b\"", "\"a_b.com\"", "\"1.2\""});
  check_schema(R"({"format": "uri"})", {"\"http://example.com/a?b=c#d\"", "\"mailto:a@b.c\"", "\"urn:isbn:123\"", "\"http://u@h:80/\""},
        {"\"//example.com\"", "\"/a/b\"", "\"http://exa mple.com\"", "\"1http://x\"", "\"http://%zz\"",
         "\"http://[::1]:80/\""});  // IP-literal hosts: not accepted (documented)
  check_schema(R"({"format": "uri", "maxLength": 300})", {"\"http://example.com/a?b=c#d\""}, {"\"a b\""});
  check_schema(R"({"format": "uri-reference"})", {"\"/a/b\"", "\"../x?y\"", "\"http://x.y\"", "\"#frag\""}, {"\"a b\"", "\"%g0\""});
  check_schema(R"({"format": "json-pointer"})", {"\"\"", "\"/a/b~0c~1\""}, {"\"a\"", "\"/~2\""});
  check_schema(R"({"type": "string", "format": "int64"})", {"\"anything\""}, {});  // unknown formats are annotations
  refused_schema(R"({"format": "idn-email"})", "/format", "not supported");
  check_schema(R"({"format": "idn-email"})", {"\"x\""}, {}, lenient());
}

// ---- enum and const ---------------------------------------------------------------------------

TEST(JsonSchemaCompiler, EnumAndConstCompareAsJsonValues) {
  check_schema(R"({"enum": ["a", "b\"c", 1, 2.5, null, true, [1, "x"], {"k": [null]}]})",
        {"\"a\"", R"("b\"c")", "1", "1.0", "2.5", "null", "true", "[1,\"x\"]", "[1.0, \"x\"]", "{\"k\":[null]}"},
        {"\"b\"", "2", "2.50001", "false", "[1]", "[\"x\",1]", "{\"k\":[]}", "{\"k\":[null],\"j\":1}"});
  check_schema(R"({"const": {"a": 1, "b": 2}})", {"{\"a\":1,\"b\":2}", "{\"b\":2,\"a\":1}"}, {"{\"a\":1}", "{\"a\":1,\"b\":2,\"c\":3}"});
  check_schema(R"({"const": "a/b"})", {"\"a/b\"", R"("a\/b")"}, {R"("a\\/b")"});
  // The other keywords filter the values.
  check_schema(R"({"type": "string", "enum": ["a", 1, "bb"], "maxLength": 1})", {"\"a\""}, {"1", "\"bb\""});
  check_schema(R"({"type": "integer", "enum": [1, 1.5, 2.0]})", {"1", "2"}, {"1.5", "2.0", "1.0"});
  check_schema(R"({"enum": [1, 2], "const": 2})", {"2"}, {"1"});
  refused_schema(R"({"enum": [1], "const": 2})", "", "accepts no JSON value");
}

// ---- numbers ----------------------------------------------------------------------------------

TEST(JsonSchemaCompiler, IntegerRanges) {
  check_schema(R"({"type": "integer", "minimum": -15, "maximum": 120})", {"-15", "-9", "0", "7", "99", "100", "120"},
        {"-16", "-150", "121", "1000", "-0.5", "120.5", "120.01", "121.0"});
  check_schema(R"({"type": "integer", "maximum": 120})", {"120.0", "-1234567890123.0"}, {"1234567890123456.0", "121.00"});
  check_schema(R"({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10})", {"1", "9"}, {"0", "-0", "10", "-1"});
  check_schema(R"({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 0, "exclusiveMinimum": true})",
        {"1", "12345"}, {"0", "-1"});
  check_schema(R"({"type": "integer", "minimum": 0.5, "maximum": 2.5})", {"1", "2"}, {"0", "3"});
  check_schema(R"({"type": "integer", "minimum": 12345678901234567890})", {"12345678901234567890", "99999999999999999999"},
        {"12345678901234567889", "1"});
  check_schema(R"({"type": "integer", "maximum": -100})", {"-100", "-101", "-99999"}, {"-99", "0", "5"});
}

TEST(JsonSchemaCompiler, MultipleOf) {
  check_schema(R"({"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 20})", {"0", "3", "9", "18"}, {"1", "21", "-3", "20"});
  check_schema(R"({"type": "integer", "allOf": [{"multipleOf": 4}, {"multipleOf": 6}]})", {"12", "-24", "0"}, {"4", "6"});
  check_schema(R"({"type": "number", "multipleOf": 5})", {"10", "-5"}, {"7", "10.5"});
  refused_schema(R"({"type": "number", "multipleOf": 0.01})", "/multipleOf", "fractional");
  check_schema(R"({"type": "number", "multipleOf": 0.01})", {"1.23"}, {}, lenient());
}

TEST(JsonSchemaCompiler, NumberBounds) {
  check_schema(R"({"type": "number", "minimum": 0.5, "maximum": 10})", {"0.5", "0.50", "1", "9.999", "10", "10.000"},
        {"0.49999", "0", "-1", "10.0001", "11", "1e0"});
  check_schema(R"({"type": "number", "exclusiveMaximum": 1})", {"0.5", "0.99999", "-3", "-1000.5"}, {"1", "1.0", "1.5"});
  check_schema(R"({"type": "number", "exclusiveMinimum": -2.5})", {"-2.4", "0", "7"}, {"-2.5", "-2.50", "-3"});
  // minimum 0 keeps every non-negative literal, exponents included.
  check_schema(R"({"type": "number", "minimum": 0})", {"0", "1e5", "0.5E-3", "123.5"}, {"-1", "-0.001", "-1e-5"});
  // A decimal bound compares as the double a validator parses it to.
  check_schema(R"({"type": "number", "maximum": 0.1})", {"0.1", "0.09"}, {"0.1000001", "0.2"});
  // 2^53 + 1 as a fraction literal is read as the double 2^53: below this bound.
  check_schema(R"({"type": "number", "minimum": 9007199254740993})", {"9007199254740994", "9007199254740996.5"},
        {"9007199254740993.0", "9007199254740992"});
}

TEST(JsonSchemaCompiler, BooleanExclusiveBoundsTakeEveryReadingUnlessDraft4) {
  // Without $schema, a later-draft validator reads exclusiveMaximum: true as "< 1".
  check_schema(R"({"type": "number", "maximum": 10, "exclusiveMaximum": true})", {"0.5", "-3"}, {"1", "5", "10"});
  check_schema(R"({"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "maximum": 10, "exclusiveMaximum": true})",
        {"0.5", "5", "9.9"}, {"10", "11"});
}

// ---- arrays -----------------------------------------------------------------------------------

TEST(JsonSchemaCompiler, ArrayItemsAndCounts) {
  check_schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})", {"[1]", "[1,2,3]"},
        {"[]", "[1,2,3,4]", "[1,\"a\"]", "[1.5]"});
  check_schema(R"({"prefixItems": [{"type": "string"}, {"type": "null"}], "items": {"type": "boolean"}})",
        {"[]", "[\"a\"]", "[\"a\",null]", "[\"a\",null,true,false]"}, {"[1]", "[\"a\",1]", "[\"a\",null,1]"});
  check_schema(R"({"prefixItems": [{"type": "string"}], "items": false})", {"[]", "[\"a\"]"}, {"[\"a\",\"b\"]"});
  check_schema(R"({"items": [{"type": "string"}], "additionalItems": false})", {"[\"a\"]"}, {"[\"a\",1]", "[1]"});
  check_schema(R"({"items": [{"type": "string"}], "additionalItems": {"type": "integer"}, "minItems": 3})", {"[\"a\",1,2]"},
        {"[\"a\",1]", "[\"a\",1,\"b\"]"});
  check_schema(R"({"properties": {"a": {"type": "array", "items": false, "minItems": 1}}})", {"{}"}, {"{\"a\":[]}", "{\"a\":[1]}"});
  check_schema(R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"});
}

TEST(JsonSchemaCompiler, UniqueItemsIsRefusedUnlessTrivial) {
  refused_schema(R"({"type": "array", "uniqueItems": true})", "/uniqueItems", "not supported");
  check_schema(R"({"type": "array", "uniqueItems": true, "maxItems": 1})", {"[]", "[1]"}, {"[1,1]"});
  check_schema(R"({"type": "array", "uniqueItems": false})", {"[1,1]"}, {});
  check_schema(R"({"type": "array", "uniqueItems": true})", {"[1,2]"}, {}, lenient());
}

// ---- objects ----------------------------------------------------------------------------------

TEST(JsonSchemaCompiler, PropertiesRequiredAndAdditional) {
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                                 "required": ["a"]})";
  check_schema(schema, {"{\"a\":1}", "{\"a\":1,\"b\":\"x\"}", "{\"b\":\"x\",\"a\":1}", "{\"a\":1,\"c\":[true]}", "{\"c\":null,\"a\":1}"},
        {"{}", "{\"b\":\"x\"}", "{\"a\":\"1\"}", "{\"a\":1,\"b\":2}", "{\"a\":1,,\"b\":\"x\"}"});
  check_schema(R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": false})", {"{}", "{\"a\":1}"},
        {"{\"b\":1}", "{\"a\":1,\"b\":1}", "{\"ab\":1}", "{\"\":1}"});
  check_schema(R"({"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}})",
        {"{\"b\":\"x\"}", "{\"a\":1,\"b\":\"y\"}"}, {"{\"b\":1}", "{\"a\":\"x\"}"});
  // A listed key spelled with an escape is not an "additional" key that escapes its schema.
  check_schema(R"({"properties": {"a": {"type": "integer"}}})", {"{\"a\":1}"}, {R"({"\u0061":"x"})"});
  // Required properties only in `required` take their schema from the rest.
  check_schema(R"({"required": ["x"], "additionalProperties": {"type": "null"}})", {"{\"x\":null}"}, {"{}", "{\"x\":1}"});
  check_schema(R"({"required": ["x"], "additionalProperties": false})", {}, {"{}", "{\"x\":1}"});
}

TEST(JsonSchemaCompiler, PropertiesComeInAnyOrder) {
  check_schema(R"({"properties": {"a": {"const": 1}, "b": {"const": 2}, "c": {"const": 3}}, "required": ["a", "b", "c"],
            "additionalProperties": false})",
        {"{\"a\":1,\"b\":2,\"c\":3}", "{\"c\":3,\"a\":1,\"b\":2}", "{\"b\":2,\"c\":3,\"a\":1}"},
        {"{\"a\":1,\"b\":2}", "{\"c\":3}", "{\"a\":1,\"b\":2,\"c\":4}"});
}

// A listed property comes at most once (a parser would keep one copy, valid either way, but no
// writer of JSON repeats a key), required or not, with additional keys or without.
TEST(JsonSchemaCompiler, ListedPropertiesDoNotRepeat) {
  check_schema(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a"],
            "additionalProperties": false})",
        {"{\"a\":1}", "{\"b\":2,\"a\":1}", "{\"a\":1,\"b\":2}"},
        {"{\"a\":1,\"a\":2}", "{\"b\":2,\"a\":1,\"b\":3}", "{\"a\":1,\"b\":2,\"a\":1}"});
  check_schema(R"({"properties": {"a": {"type": "integer"}}, "required": ["a"]})",
        {"{\"a\":1,\"x\":true}", "{\"x\":true,\"a\":1}"},
        {"{\"a\":1,\"x\":true,\"a\":2}"});
}

TEST(JsonSchemaCompiler, ManyRequiredPropertiesComeInSchemaOrder) {
  // 2^14 subsets is past the any-order budget: the required ones keep the schema's order.
  std::string props, required, in_order, reversed;
  for (int i = 0; i < 14; ++i) {
    const std::string name = std::string("p") + static_cast<char>('a' + i);
    const std::string back = std::string("p") + static_cast<char>('a' + 13 - i);
    const char* sep = i ? "," : "";
    props.append(sep).append("\"").append(name).append("\": {\"type\": \"integer\"}");
    required.append(sep).append("\"").append(name).append("\"");
    in_order.append(sep).append("\"").append(name).append("\":1");
    reversed.append(sep).append("\"").append(back).append("\":1");
  }
  std::string schema = "{\"properties\": {";
  schema.append(props).append("}, \"required\": [").append(required).append("], \"additionalProperties\": false}");
  check_schema(schema, {"{" + in_order + "}"}, {"{" + reversed + "}", "{\"pa\":1}"});
}

TEST(JsonSchemaCompiler, PatternProperties) {
  const std::string schema = R"({"properties": {"x-a": {"type": "integer"}},
                                 "patternProperties": {"^x-": {"minimum": 0}, "^y": {"type": "string"}},
                                 "additionalProperties": false})";
  check_schema(schema, {"{\"x-a\":1}", "{\"x-b\":5,\"yes\":\"s\"}", "{\"yy\":\"\"}"},
        {"{\"x-a\":-1}", "{\"x-a\":1.5}", "{\"x-b\":-1}", "{\"yes\":1}", "{\"z\":1}"});
  // Overlapping patterns: a key matching both must match both schemas.
  check_schema(R"({"patternProperties": {"a": {"type": "integer"}, "b": {"minimum": 5}}})", {"{\"ab\":5}", "{\"a\":1}", "{\"b\":7.5}"},
        {"{\"ab\":1}", "{\"ab\":5.5}", "{\"b\":4}"});
}

TEST(JsonSchemaCompiler, PropertyCounts) {
  check_schema(R"({"type": "object", "minProperties": 1})", {"{\"a\":1}"}, {"{}"});
  check_schema(R"({"type": "object", "maxProperties": 2})", {"{}", "{\"a\":1,\"b\":2}"}, {"{\"a\":1,\"b\":2,\"c\":3}"});
  check_schema(R"({"properties": {"a": {}, "b": {}}, "additionalProperties": false, "maxProperties": 1})", {"{\"a\":1}", "{}"},
        {"{\"a\":1,\"b\":2}"});
  refused_schema(R"({"type": "object", "minProperties": 2})", "/minProperties", "minProperties");
}

TEST(JsonSchemaCompiler, StrictForbidsUnlistedKeys) {
  JsonSchemaOptions strict;
  strict.strict = true;
  check_schema(R"({"properties": {"a": {}}})", {"{\"a\":1}", "{}"}, {"{\"b\":1}"}, strict);
  check_schema(R"({"properties": {"a": {}}, "additionalProperties": true})", {"{\"b\":1}"}, {}, strict);
  check_schema(R"({"type": "object"})", {"{\"b\":1}"}, {}, strict);  // no properties: any object
}

TEST(JsonSchemaCompiler, Dependencies) {
  check_schema(R"({"$schema": "http://json-schema.org/draft-07/schema#", "dependencies": {"a": ["b"]}})",
        {"{}", "{\"b\":1}", "{\"a\":1,\"b\":2}", "1"}, {"{\"a\":1}"});
  check_schema(R"({"dependentRequired": {"a": ["b"]}})", {"{}", "{\"a\":1,\"b\":2}"}, {"{\"a\":1}"});
  check_schema(R"({"dependentSchemas": {"a": {"required": ["c"]}}})", {"{\"a\":1,\"c\":1}", "{}"}, {"{\"a\":1}"});
}

// ---- combinators ------------------------------------------------------------------------------

TEST(JsonSchemaCompiler, AnyOfAndAllOf) {
  check_schema(R"({"anyOf": [{"type": "string", "maxLength": 1}, {"type": "integer", "minimum": 10}]})", {"\"a\"", "10"},
        {"\"ab\"", "9", "null"});
  check_schema(R"({"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"a": {"minimum": 3}, "b": {"type": "string"}}}]})",
        {"{\"a\":3,\"b\":\"x\"}", "{}"}, {"{\"a\":2}", "{\"a\":3.5}", "{\"b\":1}"});
  check_schema(R"({"allOf": [{"properties": {"a": {}}}, {"additionalProperties": false}]})", {"{}"}, {"{\"a\":1}"});
  check_schema(R"({"type": "object", "properties": {"t": {"type": "string"}}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})",
        {"{\"a\":1}", "{\"b\":1,\"t\":\"x\"}"}, {"{}", "{\"t\":\"x\"}", "{\"a\":1,\"t\":1}"});
  check_schema(R"({"allOf": [{"type": ["string", "integer"]}, {"type": ["integer", "null"]}]})", {"5"}, {"\"a\"", "null"});
}

TEST(JsonSchemaCompiler, OneOfIsAnyOfWhereBranchesAreDisjoint) {
  check_schema(R"({"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})", {"\"a\"", "[\"a\"]"}, {"1"});
  check_schema(R"({"oneOf": [{"properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind"]},
                      {"properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["kind"]}]})",
        {"{\"kind\":\"circle\",\"r\":1}", "{\"kind\":\"square\",\"side\":2}"}, {"{\"kind\":\"oval\"}", "{\"r\":1}"});
  check_schema(R"({"oneOf": [{"type": "integer", "maximum": 0}, {"type": "integer", "minimum": 1}]})", {"0", "1"}, {"0.5"});
}

TEST(JsonSchemaCompiler, OverlappingOneOfIsExactlyOneThroughNegation) {
  check_schema(R"({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]})", {"{\"a\":1}", "{\"b\":1}"},
        {"{\"a\":1,\"b\":1}", "{}"});
  check_schema(R"({"oneOf": [{"type": "integer"}, {"minimum": 2}]})", {"1", "2.5"}, {"2", "3"});
  refused_schema(R"({"oneOf": [{"items": {"type": "string"}}, {"items": {"type": "integer"}}]})", "/oneOf", "may both match");
  check_schema(R"({"oneOf": [{"items": {"type": "string"}}, {"items": {"type": "integer"}}]})", {"[]", "[1]"}, {}, lenient());
}

TEST(JsonSchemaCompiler, Not) {
  refused_schema(R"({"not": {}})", "", "accepts no JSON value");
  check_schema(R"({"not": {"type": "string"}})", {"1", "null", "[]"}, {"\"a\""});
  check_schema(R"({"type": "object", "not": {"required": ["a", "b"]}})", {"{\"a\":1}", "{}"}, {"{\"a\":1,\"b\":2}"});
  check_schema(R"({"type": "string", "not": {"pattern": "^x"}})", {"\"ax\""}, {"\"xa\""});
  check_schema(R"({"not": {"enum": ["a", null]}})", {"\"b\"", "1", "false"}, {"\"a\"", "null"});
  check_schema(R"({"not": {"type": "integer"}})", {"1.5", "\"a\""}, {"1", "-3"});
  check_schema(R"({"not": {"not": {"type": "integer"}}})", {"1"}, {"1.5"});
  check_schema(R"({"not": {"properties": {"a": {"type": "string"}}}})", {"{\"a\":1}"}, {"{}", "{\"a\":\"x\"}", "1"});
  refused_schema(R"({"not": {"items": {"type": "string"}}})", "/not", "not supported");
}

TEST(JsonSchemaCompiler, NegationTakesTheWiderReading) {
  // Python's $ matches before a final newline, so "ab\n" matches ^[a-c]+$ there: not excludes it.
  check_schema(R"({"type": "string", "not": {"pattern": "^[a-c]+$"}})", {"\"abd\"", "\"\""}, {"\"ab\"", "\"ab\\n\""});
  // Python's \w takes é: a key é may match the pattern, so its schema applies (and, as the
  // other dialect sees no match, additionalProperties too).
  check_schema(R"({"patternProperties": {"^\\w+$": {"type": "integer"}}, "additionalProperties": {"minimum": 0}})",
        {"{\"a\":1}", "{\"\u00e9\":1}"}, {"{\"a\":\"x\"}", "{\"\u00e9\":\"x\"}", "{\"\u00e9\":-1}", "{\"-\":-1}"});
  // A validator may skip formats, so oneOf cannot count on one to keep branches apart.
  refused_schema(R"({"oneOf": [{"type": "string", "format": "date"}, {"type": "string", "pattern": "^x"}]})", "/oneOf", "may both match");
  check_schema(R"({"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "^b"}]})", {"\"ab\"", "\"ba\""}, {"\"c\""});
}

TEST(JsonSchemaCompiler, KeywordsFollowTheDeclaredDraft) {
  const std::string draft4 = R"("$schema": "http://json-schema.org/draft-04/schema#")";
  // const is no draft-4 keyword: both branches match {}, so oneOf rejects it.
  check_schema("{" + draft4 + R"(, "oneOf": [{"const": null}, {"type": "object"}]})", {}, {"{}"});
  check_schema("{" + draft4 + R"(, "prefixItems": [true], "items": {"type": "integer"}})", {"[1]"}, {"[\"a\"]"});
  check_schema("{" + draft4 + R"(, "minimum": 5, "exclusiveMinimum": 0})", {"5"}, {"4"});
  check_schema("{" + draft4 + R"(, "minimum": 5, "exclusiveMinimum": 1})", {"6"}, {"5"});
  check_schema(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "dependencies": {"a": ["b"]}})", {"{\"a\":1}"}, {});
  check_schema(R"({"$schema": "http://json-schema.org/draft-07/schema#", "dependentRequired": {"a": ["b"]}})", {"{\"a\":1}"}, {});
  refused_schema(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "items": [{}]})", "/items", "prefixItems");
}

// ---- references -------------------------------------------------------------------------------

TEST(JsonSchemaCompiler, RecursiveRefs) {
  const std::string list = R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                               "next": {"$ref": "#/$defs/node"}}, "required": ["v"], "additionalProperties": false}},
                               "$ref": "#/$defs/node"})";
  check_schema(list, {"{\"v\":1}", "{\"v\":1,\"next\":{\"v\":2,\"next\":{\"v\":3}}}"}, {"{\"v\":1,\"next\":{}}", "{\"next\":{\"v\":1}}"});
  check_schema(R"({"type": ["array", "integer"], "items": {"$ref": "#"}})", {"1", "[1,[2,[[]]]]"}, {"[\"a\"]", "[[1.5]]"});
  check_schema(R"({"definitions": {"a/b": {"type": "integer"}, "c~d": {"type": "string"}},
            "properties": {"x": {"$ref": "#/definitions/a~1b"}, "y": {"$ref": "#/definitions/c~0d"}}})",
        {"{\"x\":1,\"y\":\"s\"}"}, {"{\"x\":\"1\"}", "{\"y\":1}"});
  check_schema(R"({"$defs": {"s": {"$anchor": "str", "type": "string"}}, "items": {"$ref": "#str"}})", {"[\"a\"]"}, {"[1]"});
  check_schema(R"({"$id": "http://example.com/root.json", "definitions": {"i": {"type": "integer"}},
            "items": {"$ref": "http://example.com/root.json#/definitions/i"}})",
        {"[1]"}, {"[\"a\"]"});
}

TEST(JsonSchemaCompiler, RefsResolveAgainstTheirResource) {
  check_schema(R"({"$id": "http://example.com/root.json",
            "$defs": {"a": {"$id": "sub/a.json", "type": "integer", "$defs": {"b": {"type": "string"}}}},
            "properties": {"x": {"$ref": "sub/a.json"}, "y": {"$ref": "http://example.com/sub/a.json#/$defs/b"},
                           "z": {"$ref": "sub/../sub/./a.json"}}})",
        {"{\"x\":1,\"y\":\"s\",\"z\":2}"}, {"{\"x\":\"1\"}", "{\"y\":1}", "{\"z\":\"s\"}"});
  check_schema(R"({"$id": "http://example.com/a/b/root.json", "$defs": {"c": {"$id": "/c.json", "type": "null"},
            "d": {"$id": "../d.json", "type": "boolean"}},
            "properties": {"x": {"$ref": "http://example.com/c.json"}, "y": {"$ref": "http://example.com/a/d.json"}}})",
        {"{\"x\":null,\"y\":true}"}, {"{\"x\":1}", "{\"y\":null}"});
  check_schema(R"({"$defs": {"a": {"$id": "dir/a.json", "type": "integer"}, "b": {"$id": "dir/b.json", "$ref": "a.json"}},
            "$ref": "dir/b.json"})", {"1"}, {"\"1\""});
  // "#/..." inside a resource with its own $id names that resource's subschemas.
  check_schema(R"({"$id": "http://e.com/r", "$defs": {"n": {"$id": "http://e.com/n", "$defs": {"t": {"type": "string"}},
            "items": {"$ref": "#/$defs/t"}}, "t": {"type": "integer"}}, "$ref": "http://e.com/n"})",
        {"[\"a\"]"}, {"[1]"});
  // In draft 7, "id" is no identifier: the $ref resolves against the root.
  check_schema(R"({"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"t": {"type": "integer"}},
            "properties": {"a": {"id": "http://other.com/", "definitions": {"t": {"type": "string"}}, "$ref": "#/definitions/t"}}})",
        {"{\"a\":1}"}, {"{\"a\":\"s\"}"});
}

TEST(JsonSchemaCompiler, RefSiblingsFollowTheDraft) {
  const std::string defs = R"("definitions": {"s": {"type": "string"}})";
  check_schema("{" + defs + R"(, "$ref": "#/definitions/s", "maxLength": 1})", {"\"a\""}, {"\"ab\"", "1"});
  check_schema(R"({"$schema": "http://json-schema.org/draft-07/schema#", )" + defs + R"(, "$ref": "#/definitions/s", "maxLength": 1})",
        {"\"a\"", "\"ab\""}, {"1"});
}

TEST(JsonSchemaCompiler, BadRefsAreRefused) {
  refused_schema(R"({"properties": {"a": {"$ref": "#/definitions/missing"}}})", "/properties/a/$ref", "does not resolve");
  refused_schema(R"({"$ref": "http://example.com/other.json"})", "/$ref", "remote $ref");
  refused_schema(R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})", "/$defs/a", "contains itself");
  refused_schema(R"({"$schema": "http://json-schema.org/draft-07/schema#", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
              "$ref": "#/$defs/a"})", "/$defs/a/$ref", "cycle");
  refused_schema(R"({"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"})", "/$defs/a", "contains itself");
}

// ---- refusals, leniency, annotations ----------------------------------------------------------

TEST(JsonSchemaCompiler, UnenforceableKeywordsAreRefusedWithTheirPointer) {
  refused_schema(R"({"properties": {"a": {"contains": {"type": "integer"}}}})", "/properties/a/contains", "contains is not supported");
  refused_schema(R"({"if": {"type": "string"}, "then": {"maxLength": 1}})", "/if", "if / then / else");
  refused_schema(R"({"propertyNames": {"pattern": "^a"}})", "/propertyNames", "propertyNames");
  refused_schema(R"({"$defs": {"x": {"$dynamicRef": "#x"}}, "$ref": "#/$defs/x"})", "/$defs/x/$dynamicRef", "not supported");
  refused_schema(R"({"type": "object", "properties": {"a": {}}, "allOf": [{}], "unevaluatedProperties": false})",
          "/unevaluatedProperties", "not supported");
  check_schema(R"({"if": {"type": "string"}, "then": {"maxLength": 1}, "type": "string"})", {"\"abc\""}, {"1"}, lenient());
  check_schema(R"js({"type": "string", "pattern": "(?=a)b"})js", {"\"x\""}, {"1"}, lenient());
}

// "x-guidance": {"lenient": true} at the root (llguidance's convention): what cannot be enforced is
// not, each such keyword listed with its pointer, and everything else still is.
TEST(JsonSchemaCompiler, ALenientSchemaListsWhatItDoesNotEnforce) {
  const std::string schema = R"js({"x-guidance": {"lenient": true}, "type": "object", "properties": {
      "a": {"type": "array", "uniqueItems": true},
      "b": {"type": "string", "pattern": "(?=a)b"},
      "c": {"oneOf": [{"items": {"type": "string"}}, {"items": {"type": "integer"}}]},
      "d": {"type": "string", "if": {"maxLength": 2}, "then": {"minLength": 1}}}, "additionalProperties": false})js";
  const Grammar g = compile(schema);
  std::vector<std::string> pointers;
  for (const Grammar::Relaxation& relaxation : g.relaxations()) {
    pointers.push_back(relaxation.where);
    EXPECT_TRUE(relaxation.field.empty()) << relaxation.where;
    EXPECT_NE(relaxation.what.find("(lenient)"), std::string::npos) << relaxation.what;
  }
  std::sort(pointers.begin(), pointers.end());
  EXPECT_EQ(pointers, (std::vector<std::string>{"/properties/a/uniqueItems", "/properties/b/pattern",
                                                "/properties/c/oneOf", "/properties/d/if"}));
  EXPECT_TRUE(matches(g, R"({"a":[1,1],"b":"x","c":[],"d":""})"));  // what is not enforced is not
  EXPECT_FALSE(matches(g, R"({"a":1})"));                           // what is, is
  EXPECT_FALSE(matches(g, R"({"b":1})"));
  EXPECT_FALSE(matches(g, R"({"e":1})"));
  // A schema that needs no leniency lists nothing; "lenient": false, or the option below the
  // root (an annotation there, as to validators), refuses as usual.
  EXPECT_TRUE(compile(R"({"x-guidance": {"lenient": true}, "type": "integer"})").relaxations().empty());
  refused_schema(R"({"x-guidance": {"lenient": false}, "uniqueItems": true, "type": "array"})", "/uniqueItems",
                 "\"x-guidance\": {\"lenient\": true}");
  refused_schema(R"({"properties": {"a": {"x-guidance": {"lenient": true}, "type": "array", "uniqueItems": true}}})",
                 "/properties/a/uniqueItems", "not supported");
  // Composed grammars keep their parts' relaxations, named after the part's request field.
  Grammar outer;
  outer.set_start(outer.include(g, "tools.0.input_schema"));
  ASSERT_EQ(outer.relaxations().size(), 4u);
  for (const Grammar::Relaxation& relaxation : outer.relaxations()) EXPECT_EQ(relaxation.field, "tools.0.input_schema");
}

TEST(JsonSchemaCompiler, XGuidanceOptionsAreReadOrRefused) {
  const Grammar compact = compile(R"({"x-guidance": {"whitespace_flexible": false}, "type": "object",
                                      "properties": {"a": {"type": "array"}}})");
  EXPECT_TRUE(matches(compact, R"({"a":[1,2]})"));
  EXPECT_FALSE(matches(compact, R"({"a": [1,2]})"));
  EXPECT_FALSE(matches(compact, R"({"a":[1, 2]})"));
  EXPECT_FALSE(matches(compact, " {\"a\":[]}"));
  const Grammar flexible = compile(R"({"x-guidance": {"whitespace_flexible": true}, "type": "object"})");
  EXPECT_TRUE(matches(flexible, R"({ "a" : [1, 2] })"));
  refused_schema(R"({"x-guidance": 1})", "/x-guidance", "must be an object");
  refused_schema(R"({"x-guidance": {"lenient": "yes"}})", "/x-guidance/lenient", "true or false");
  refused_schema(R"({"x-guidance": {"item_separator": ","}})", "/x-guidance/item_separator", "unknown option");
}

TEST(JsonSchemaCompiler, AnnotationsAndUnknownKeywordsAreIgnored) {
  check_schema(R"({"title": "t", "description": "d", "examples": [1], "default": 2, "$comment": "c", "deprecated": true,
            "readOnly": true, "x-custom": {"type": "string"}, "type": "integer"})",
        {"1"}, {"\"a\""});
  check_schema(R"({"properties": {"a": {}}, "unevaluatedProperties": false})", {"{\"a\":1}"}, {"{\"b\":1}"});
}

// ---- limits -----------------------------------------------------------------------------------

TEST(JsonSchemaCompiler, LimitsAreEnforced) {
  std::string deep = "true";
  for (int i = 0; i < 200; ++i) deep = "{\"items\": " + deep + "}";
  refused_schema(deep, "*", "max_depth");
  CompileLimits small;
  small.max_symbols = 500;
  refused_schema(R"({"type": "object", "properties": {"a": {"format": "date-time"}}})", "/properties/a", "max_symbols", {}, small);
  refused_schema(R"({"type": "string", "minLength": 20000})", "/minLength", "max_repeat");
  refused_schema(R"({"pattern": "(a{1000}){1000}"})", "/pattern", "");
  // A chain of $refs deeper than the emission bound is refused, not a stack overflow.
  auto chain = [](int n) {
    std::string defs;
    for (int i = 0; i < n; ++i) {
      defs.append(i ? "," : "").append("\"d").append(std::to_string(i)).append("\": {\"type\": \"object\", \"properties\": {\"n\": ");
      defs.append(i + 1 < n ? "{\"$ref\": \"#/definitions/d" + std::to_string(i + 1) + "\"}" : "{\"type\": \"integer\"}").append("}}");
    }
    return "{\"definitions\": {" + defs + "}, \"$ref\": \"#/definitions/d0\"}";
  };
  check_schema(chain(24), {"{\"n\":{\"n\":{}}}"}, {"{\"n\":1}"});
  refused_schema(chain(2000), "*", "max_depth");
  // A maximum above max_repeat only loses longer values.
  check_schema(R"({"type": "string", "maxLength": 100000})", {"\"abc\""}, {"1"});
  std::string big_enum = "{\"enum\": [";
  for (int i = 0; i < 10000; ++i) big_enum += (i ? ",\"v" : "\"v") + std::to_string(i) + "\"";
  big_enum += "]}";
  check_schema(big_enum, {"\"v0\"", "\"v9999\""}, {"\"v10000\"", "\"v\""});
}

TEST(JsonSchemaCompiler, AnyJson) {
  Grammar value = any_json(false);
  Grammar object = any_json(true);
  for (const char* text : {"{}", "{\"a\":[1,{\"b\":null}]}", " { \"x\" : \"y\" } "}) {
    EXPECT_TRUE(matches(value, text)) << text;
    EXPECT_TRUE(matches(object, text)) << text;
  }
  for (const char* text : {"1", "\"s\"", "[true]", "null"}) {
    EXPECT_TRUE(matches(value, text)) << text;
    EXPECT_FALSE(matches(object, text)) << text;
  }
  for (const char* text : {"{", "{\"a\":}", "[1,]", "{} {}"}) EXPECT_FALSE(matches(value, text)) << text;
  JsonSchemaOptions tight;
  tight.max_whitespace = 3;
  EXPECT_FALSE(matches(any_json(true, tight), "{    }"));
  EXPECT_TRUE(matches(any_json(true, tight), "{   }"));
}

// ---- the automata -----------------------------------------------------------------------------

TEST(JsonSchemaDfa, RegexSearchAgreesWithStdRegexOnAscii) {
  // Every string over {a, b, -} up to length 6 against patterns both dialects read alike.
  const std::vector<std::string> patterns = {"a", "^a", "a$", "^a|b$", "a*b+", "^(ab|ba)*$", "[^a]-", "^.{2,3}$",
                                             "(a|b){2}-?$", "^[a-b]+$", "b?a{1,2}b", "^$", "-|^b"};
  std::vector<std::string> inputs{""};
  for (int len = 1; len <= 6; ++len) {
    std::vector<std::string> next;
    for (const std::string& s : inputs)
      if (static_cast<int>(s.size()) == len - 1)
        for (char c : {'a', 'b', '-'}) next.push_back(s + c);
    inputs.insert(inputs.end(), next.begin(), next.end());
  }
  for (const std::string& p : patterns) {
    schema::Dfa dfa = schema::regex_dfa(p, true, {});
    std::regex re(p, std::regex::ECMAScript);
    for (const std::string& s : inputs) EXPECT_EQ(dfa.matches(s), std::regex_search(s, re)) << p << " on \"" << s << "\"";
  }
}

TEST(JsonSchemaDfa, ComplementAndIntersection) {
  schema::DfaLimits limits;
  schema::Dfa words = schema::words_dfa({"a", "ab", "\xC3\xA9"});
  schema::Dfa others = schema::complement(words, limits);
  for (const char* w : {"a", "ab", "\xC3\xA9"}) {
    EXPECT_TRUE(words.matches(w));
    EXPECT_FALSE(others.matches(w));
  }
  for (const char* w : {"", "b", "abc", "\xC3\xA8"}) {
    EXPECT_FALSE(words.matches(w));
    EXPECT_TRUE(others.matches(w));
  }
  EXPECT_FALSE(others.matches("\xC3"));  // complements stay within valid UTF-8
  schema::Dfa len = schema::length_dfa(1, 2, limits);
  EXPECT_TRUE(len.matches("\xF0\x9F\x98\x80\xC3\xA9"));
  EXPECT_FALSE(len.matches("abc"));
  EXPECT_FALSE(len.matches(""));
  EXPECT_TRUE(schema::intersect(words, schema::length_dfa(2, 2, limits), limits).matches("ab"));
  EXPECT_FALSE(schema::intersect(words, schema::length_dfa(2, 2, limits), limits).matches("a"));
  EXPECT_TRUE(schema::intersect(words, others, limits).empty());
}

TEST(JsonSchemaDfa, NumberAutomataCompareExactly) {
  schema::NumberSpec spec;
  spec.lower = schema::parse_decimal("-1.25");
  spec.upper = schema::parse_decimal("300");
  schema::Dfa dfa = schema::number_dfa(spec, {});
  for (const char* yes : {"-1.25", "-1.2", "-1", "-0", "0", "0.000", "299.999", "300", "300.0", "12"})
    EXPECT_TRUE(dfa.matches(yes)) << yes;
  for (const char* no : {"-1.26", "-1.250001", "-2", "300.0001", "301", "1000", "01", "1.", "-", ".5", "1e2"})
    EXPECT_FALSE(dfa.matches(no)) << no;
  EXPECT_EQ(schema::parse_decimal("1.5e3")->to_string(), "1500");
  EXPECT_EQ(schema::parse_decimal("-0.00e5")->to_string(), "0");
  EXPECT_EQ(schema::parse_decimal("12e-4")->to_string(), "0.0012");
}

// ---- JSONSchemaBench ------------------------------------------------------------------------

TEST(JsonSchemaBench, DevSplitValidAcceptedInvalidRejected) {
  const std::filesystem::path path =
      std::filesystem::path(DEEPINFER_ASSET_DIR) / ".." / ".." / "shared" / "structured" / "jsonschemabench_dev.jsonl.xz";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not in this checkout";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(("xz -dc '" + path.string() + "'").c_str(), "r"), pclose);
  ASSERT_TRUE(pipe) << "cannot run xz";
  struct Counts {
    int schemas = 0, compiled = 0, valid = 0, valid_accepted = 0, pretty = 0, pretty_accepted = 0, invalid = 0,
        invalid_rejected = 0, lenient = 0, lenient_valid = 0, lenient_valid_accepted = 0;
  };
  std::map<std::string, Counts> splits;
  std::map<std::string, int> refusals;
  const JsonSchemaOptions options;
  std::string line;
  char buffer[1 << 16];
  auto next_line = [&]() {
    line.clear();
    while (fgets(buffer, sizeof buffer, pipe.get())) {
      line += buffer;
      if (!line.empty() && line.back() == '\n') return true;
    }
    return !line.empty();
  };
  // Every schema in the release build; every 8th under the sanitizers (sanitizer_scale.h), where
  // every 4th took 32 s.
  const int stride = deepinfer::testing::release_or_sanitized(1, 8);
  for (int index = 0; next_line(); ++index) {
    if (index % stride != 0) continue;
    const ojson record = ojson::parse(line);
    const std::string split = record["split"], id = record["id"];
    Counts& c = splits[split];
    ++c.schemas;
    Grammar g;
    try {
      g = compile_json_schema(record["schema"], options);
    } catch (const CompileError& e) {
      std::string why = e.what();
      refusals[why.substr(why.find(": ") == std::string::npos ? 0 : why.find(": ") + 2).substr(0, 50)]++;
      // Lenient ("x-guidance": {"lenient": true}), what was refused may compile; then the grammar
      // lists what it does not enforce (never a silent drop). Its valid instances are counted, not
      // required: the over-constraints by design (docs/STRUCTURED.md) apply there too, and the
      // strict grammar never met them on these schemas.
      Grammar relaxed;
      try {
        relaxed = compile_json_schema(record["schema"], lenient());
      } catch (const CompileError&) {
        continue;
      }
      ++c.lenient;
      EXPECT_FALSE(relaxed.relaxations().empty()) << split << " " << id << ": lenient compiled what strict refused ("
                                                  << e.what() << ") without listing a relaxation";
      for (const ojson& test : record["tests"])
        if (test["valid"].get<bool>()) {
          ++c.lenient_valid;
          c.lenient_valid_accepted += matches(relaxed, test["data"].dump());
        }
      continue;
    }
    ++c.compiled;
    ++c.lenient;
    for (const ojson& test : record["tests"]) {
      const std::string compact = test["data"].dump(), pretty = test["data"].dump(2);
      const bool fits = longest_whitespace_run(pretty) <= static_cast<std::size_t>(options.max_whitespace);
      if (test["valid"].get<bool>()) {
        ++c.valid;
        bool ok = matches(g, compact);
        c.valid_accepted += ok;
        EXPECT_TRUE(ok) << split << " " << id << ": valid instance rejected: " << compact.substr(0, 400);
        if (fits) {
          ++c.pretty;
          bool pretty_ok = matches(g, pretty);
          c.pretty_accepted += pretty_ok;
          EXPECT_TRUE(pretty_ok) << split << " " << id << ": valid pretty instance rejected: " << pretty.substr(0, 400);
        }
      } else {
        ++c.invalid;
        bool accepted = matches(g, compact) || (fits && matches(g, pretty));
        c.invalid_rejected += !accepted;
        EXPECT_FALSE(accepted) << split << " " << id << ": INVALID instance accepted: " << compact.substr(0, 400);
      }
    }
  }
  Counts total;
  std::printf("%-16s %8s %9s %15s %15s %17s %8s\n", "split", "schemas", "compiled", "valid accepted", "pretty accepted",
              "invalid rejected", "lenient");
  for (const auto& [split, c] : splits) {
    std::printf("%-16s %8d %4d %3.0f%% %9d/%-5d %9d/%-5d %11d/%-5d %8d\n", split.c_str(), c.schemas, c.compiled,
                100.0 * c.compiled / std::max(c.schemas, 1), c.valid_accepted, c.valid, c.pretty_accepted, c.pretty,
                c.invalid_rejected, c.invalid, c.lenient);
    total.schemas += c.schemas;
    total.compiled += c.compiled;
    total.lenient += c.lenient;
    total.lenient_valid += c.lenient_valid;
    total.lenient_valid_accepted += c.lenient_valid_accepted;
    total.invalid += c.invalid;
    total.invalid_rejected += c.invalid_rejected;
  }
  std::printf("%-16s %8d %4d %3.0f%% %54d\nvalid instances of the schemas only lenient compiles: %d/%d accepted\n"
              "refused:\n",
              "all", total.schemas, total.compiled, 100.0 * total.compiled / std::max(total.schemas, 1), total.lenient,
              total.lenient_valid_accepted, total.lenient_valid);
  for (const auto& [why, n] : refusals) std::printf("  %3d  %s\n", n, why.c_str());
  EXPECT_EQ(total.invalid_rejected, total.invalid) << "invalid instances accepted (under-constraint)";
  EXPECT_GT(total.schemas, 0);
}

}  // namespace
}  // namespace deepinfer::grammar

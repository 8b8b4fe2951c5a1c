// The GBNF compiler (llama.cpp's grammars/README.md syntax): each feature's accepted and rejected
// strings (UTF-8 included), recursion (left recursion too), whole grammars (JSON, arithmetic), and
// every refusal with its byte offset.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grammar/compile.h"
#include "text_grammar_checks.h"

namespace deepinfer::grammar {
namespace {

const testing::LanguageCheck check_gbnf{compile_gbnf};
const testing::RefusalCheck refused_gbnf{compile_gbnf};

TEST(GbnfCompiler, LiteralsAndEscapes) {
  check_gbnf(R"(root ::= "hello")", {"hello"}, {"", "hell", "hello!", "Hello"});
  check_gbnf(R"(root ::= "a\nb\t\"\\\x41\u00e9\U0001F600")", {"a\nb\t\"\\Aé😀"}, {"a\\nb"});
  check_gbnf(R"(root ::= "日本" "語")", {"日本語"}, {"日本"});
  check_gbnf(R"(root ::= "\[\]")", {"[]"}, {"\\[\\]"});
  check_gbnf(R"(root ::= "")", {""}, {"a"});
  check_gbnf("root ::= \"a\" \"b\"  \"c\"", {"abc"}, {"a b c"});
}

TEST(GbnfCompiler, CharacterClasses) {
  check_gbnf("root ::= [a-z]+", {"abc", "z"}, {"", "A", "a1"});
  check_gbnf("root ::= [a-zA-Z0-9_-]", {"a", "Z", "5", "_", "-"}, {".", ""});
  check_gbnf(R"(root ::= [^"\\]*)", {"", "abc", "日本", "😀\n"}, {"\"", "a\\", "\xFF", "\xC3"});
  check_gbnf("root ::= [^a-z]", {"A", "é", "\n", "😀"}, {"a", "m", "\xED\xA0\x80"});
  check_gbnf("root ::= [日-本é]", {"日", "本", "é", "\u6600"}, {"e", "語"});
  check_gbnf(R"(root ::= [\]\-\n\x41])", {"]", "-", "\n", "A"}, {"\\", "B"});
  check_gbnf("root ::= [a-]", {"a", "-"}, {"b"});
  check_gbnf("root ::= [😀-😂]", {"😁"}, {"😃"});
}

TEST(GbnfCompiler, AnyCharacter) {
  check_gbnf("root ::= .", {"a", "\n", "é", "日", "😀"}, {"", "ab", "\x80", "\xC3", "\xC0\xAF", "\xED\xA0\x80", "\xF5\x80\x80\x80"});
  check_gbnf("root ::= .* \"!\"", {"!", "héllo!", "a\nb!"}, {"hello", "\xFF!"});
}

TEST(GbnfCompiler, GroupsAndRepetition) {
  check_gbnf(R"(root ::= ("a" | "b") "c")", {"ac", "bc"}, {"c", "abc"});
  check_gbnf(R"(root ::= "a"* "b"+ "c"?)", {"b", "aabbc", "bc"}, {"", "a", "abcc"});
  check_gbnf(R"(root ::= "ab"{2})", {"abab"}, {"ab", "ababab"});
  check_gbnf(R"(root ::= "a"{2,})", {"aa", "aaaaa"}, {"a"});
  check_gbnf(R"(root ::= "a"{1,3})", {"a", "aaa"}, {"", "aaaa"});
  check_gbnf(R"(root ::= "a"{,2})", {"", "a", "aa"}, {"aaa"});
  check_gbnf(R"(root ::= "a"{ 2 , 3 })", {"aa", "aaa"}, {"a"});
  check_gbnf(R"(root ::= ("x" "y"?)+)", {"x", "xyx", "xxy"}, {"y", ""});
  check_gbnf(R"(root ::= ("a"{2}){2})", {"aaaa"}, {"aa", "aaa"});
  check_gbnf(R"(root ::= "é"+)", {"é", "éé"}, {"\xC3\xA9\xA9"});
  check_gbnf(R"(root ::= ((("a"))))", {"a"}, {""});
}

TEST(GbnfCompiler, RulesCommentsAndLayout) {
  check_gbnf(R"(# a comment
root ::= greeting " " name   # trailing comment
greeting ::= "hi" | "hello"
name ::= [A-Z] [a-z]*
)",
        {"hi Bob", "hello X"}, {"hi bob", "hey Bob", "hi  Bob"});
  // Names with dashes and digits; a body on the line after ::=; alternatives on following lines;
  // a group across lines.
  check_gbnf(R"(root ::=
  first-item
  | second-2
first-item ::= "one"
second-2 ::= (
    "two"
    | "deux"  # comment inside a group
  )
)",
        {"one", "two", "deux"}, {"", "three"});
  check_gbnf("root ::= \"a\" |\n  \"b\"\r\n", {"a", "b"}, {"ab"});
  check_gbnf("root ::= x\nx ::= \"1\"", {"1"}, {"x"});  // no trailing newline
  check_gbnf("root ::= \"a\" | ", {"a", ""}, {"b"});      // an empty alternative
}

TEST(GbnfCompiler, Recursion) {
  check_gbnf(R"g(root ::= "(" root ")" root | "")g", {"", "()", "(())()", "((()))"}, {"(", ")(", "(()"});
  // Left recursion.
  check_gbnf(R"(root ::= expr
expr ::= expr "+" term | term
term ::= [0-9]+)",
        {"1", "1+2", "10+20+3"}, {"", "+1", "1+", "1++2"});
  // Mutual recursion.
  check_gbnf(R"(root ::= a
a ::= "x" b | "x"
b ::= "y" a)",
        {"x", "xyx", "xyxyx"}, {"xy", "y"});
}

TEST(GbnfCompiler, JsonGrammar) {
  const char* json = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
)";
  check_gbnf(json,
        {R"({})", R"({"a": 1})", R"({"a":[1, 2.5, -3e4, true, null], "b": {"c": "d\n\u00e9"}})", "{\"日本\": \"😀\"}",
         "{\n \"a\": []\n}"},
        {"", "[]", R"({"a" 1})", R"({"a": 01})", R"({"a": "\x"})", "{\"a\": \"\x01\"}", R"({"a": tru})",
         "{\"a\": \"\xFF\"}"});
}

TEST(GbnfCompiler, Refusals) {
  refused_gbnf("root ::= foo", 9, "undefined rule 'foo'");
  refused_gbnf("root ::= a b\na ::= \"x\"", 11, "undefined rule 'b'");
  refused_gbnf("start ::= \"a\"", 0, "no rule named 'root'");
  refused_gbnf("root ::= \"a\"\nroot ::= \"b\"", 13, "defined twice");
  refused_gbnf("root ::= \"abc", 9, "unterminated string");
  refused_gbnf("root ::= [abc", 9, "unterminated character class");
  refused_gbnf("root ::= (\"a\" | \"b\"", 9, "missing ')'");
  refused_gbnf("root ::= \"a\")", 12, "unmatched ')'");
  refused_gbnf("root ::= [z-a]", 10, "out of order");
  refused_gbnf("root ::= \"\\q\"", 10, "bad escape");
  refused_gbnf("root ::= \"\\x4\"", 10, "two hex digits");
  refused_gbnf("root ::= \"\\uD800\"", 10, "surrogate");
  refused_gbnf("root = \"a\"", 5, "expected '::='");
  refused_gbnf("root ::= <think> \"a\"", 9, "token references");
  refused_gbnf("root ::= !\"a\"", 9, "token references");
  refused_gbnf("root ::= * \"a\"", 9, "nothing to repeat");
  refused_gbnf("root ::= \"a\"{3,1}", 12, "minimum above maximum");
  refused_gbnf("root ::= \"a\"{x}", 12, "malformed repetition");
  refused_gbnf("root ::= \"a\"{20000}", 12, "above the limit");
  refused_gbnf("root ::= \"a\" @", 13, "unexpected character");
  refused_gbnf("root ::= \"\xFF\"", 10, "invalid UTF-8");
  refused_gbnf("::= \"a\"", 0, "expected a rule name");
}

TEST(GbnfCompiler, RandomTextCompilesOrIsRefused) {
  const std::vector<std::string> pieces = {"root", " ::= ", "a", " ::= ", "\"x\"", "\"\\", "[", "]", "^", "-", "(", ")",
                                           "|", "*", "+", "?", "{", "}", "2", ",", ".", "\n", "#c\n", " ", "<", "\\u"};
  testing::expect_random_texts_compile_or_are_refused(compile_gbnf, 5, "root ::= ", pieces);
}

TEST(GbnfCompiler, Limits) {
  const CompileLimits shallow{.max_depth = 4};
  EXPECT_NO_THROW(compile_gbnf("root ::= ((((\"a\"))))", shallow));
  refused_gbnf("root ::= (((((\"a\")))))", 13, "nested deeper", shallow);
  refused_gbnf("root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')'), 9 + 32, "nested deeper");
  refused_gbnf("root ::= x{600} x{600}\nx ::= \"a\"", 16, "grammar too large", {.max_symbols = 1000});
  refused_gbnf("root ::= \"a\"{51}", 12, "above the limit", {.max_repeat = 50});
  // Nested repetition stays linear in the counts.
  EXPECT_LT(compile_gbnf("root ::= ((\"a\"{100}){100}){100}").size(), 2000);
}

}  // namespace
}  // namespace deepinfer::grammar

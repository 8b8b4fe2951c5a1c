// The Lark compiler (the form llguidance takes): rules and terminals, literals, /regex/
// terminals, optional [..], groups, repetition (* + ? ~ {}), modifiers and aliases, comments,
// whole grammars, and every refusal with its byte offset.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grammar/compile.h"
#include "text_grammar_checks.h"

namespace deepinfer::grammar {
namespace {

const testing::LanguageCheck check_lark{compile_lark};
const testing::RefusalCheck refused_lark{compile_lark};

TEST(LarkCompiler, Literals) {
  check_lark(R"(start: "hello" " " "world")", {"hello world"}, {"helloworld", ""});
  check_lark(R"(start: "a\nb\t\"\\\x41\u00e9")", {"a\nb\t\"\\Aé"}, {"a\\nb"});
  check_lark(R"(start: "日本" | "😀")", {"日本", "😀"}, {"日", ""});
  check_lark(R"(start: "select"i)", {"select", "SELECT", "SeLeCt"}, {"selec", "s3lect"});
  check_lark(R"(start: "a".."f")", {"a", "c", "f"}, {"g", "", "ab"});
  check_lark(R"(start: "α".."ω")", {"α", "λ", "ω"}, {"a", "Ω"});
}

TEST(LarkCompiler, RegexTerminals) {
  check_lark(R"(start: /[0-9]+/)", {"0", "123"}, {"", "12a"});
  check_lark(R"(start: /a.c/)", {"abc", "aéc"}, {"a\nc", "ac"});
  check_lark(R"(start: /a.c/s)", {"abc", "a\nc"}, {"ac"});
  check_lark(R"(start: /(.|\n)*/)", {"", "x\ny", "日本"}, {"\xFF"});
  check_lark(R"(start: /[^\/]+/ "/" /\d{2}/)", {"ab/12", "日/00"}, {"a/b/12", "ab/1"});
  check_lark(R"(start: /^ab$/)", {"ab"}, {"xab"});  // terminals are anchored: ^ and $ are no-ops
  check_lark(R"(start: /[^{](.|\n)*/ | "{}")", {"hi\nthere", "{}", "x"}, {"{x", ""});
}

TEST(LarkCompiler, RulesTerminalsAndOperators) {
  check_lark(R"(
start: greeting NAME
greeting: "hi " | "hello "
NAME: UPPER LOWER*
UPPER: "A".."Z"
LOWER: /[a-z]/
)",
        {"hi Bob", "hello X"}, {"hi bob", "hey Bob"});
  check_lark(R"(start: "a" ["b"] "c")", {"ac", "abc"}, {"abbc"});
  check_lark(R"(start: ("a" | "b")+ "c"?)", {"a", "abba", "abc"}, {"", "c"});
  check_lark(R"(start: "x"*)", {"", "xxx"}, {"y"});
  check_lark(R"(start: "ab" ~ 2)", {"abab"}, {"ab", "ababab"});
  check_lark(R"(start: "a" ~ 2..3)", {"aa", "aaa"}, {"a", "aaaa"});
  check_lark(R"(start: "a"{2})", {"aa"}, {"a"});
  check_lark(R"(start: "a"{1,2} "b"{,2} "c"{2,})", {"acc", "aabbccc"}, {"abbbcc", "ac"});
  check_lark(R"(start: ["a" | "b"] "c")", {"c", "ac", "bc"}, {"abc"});
  check_lark(R"(start: (("a")))", {"a"}, {""});
}

TEST(LarkCompiler, ModifiersAliasesPrioritiesComments) {
  check_lark(R"g(// a comment
?start: sum          // trailing comment
# hash comments too
!sum: sum "+" atom -> add
    | atom
_atom_alias: atom
atom: NUMBER | "(" sum ")"
NUMBER.2: /[0-9]+/
)g",
        {"1", "1+2", "(1+2)+30"}, {"", "1+", "(1"});
  check_lark("start: a\n     | b\na: \"a\"\nb: \"b\"", {"a", "b"}, {"ab"});
  check_lark("start: \"a\" |\n  \"b\"", {"a", "b"}, {""});
  check_lark("start: (\"a\"\n  | \"b\")\n  \"c\"", {"ac", "bc"}, {"c"});
  check_lark("start: item-list\nitem-list: \"x\"+", {"xx"}, {""});
}

TEST(LarkCompiler, Recursion) {
  check_lark(R"g(start: "(" start ")" start |)g", {"", "()", "(())()"}, {"(", ")("});
  check_lark(R"(start: expr
expr: expr "*" NUM | NUM
NUM: /[0-9]+/)",
        {"2", "2*3*4"}, {"*", "2*"});
}

TEST(LarkCompiler, JsonGrammar) {
  const char* json = R"(
start: value
value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" WS? [pair (WS? "," WS? pair)*] WS? "}"
pair: STRING WS? ":" WS? value
array: "[" WS? [value (WS? "," WS? value)*] WS? "]"
STRING: /"([^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/
NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/
WS: /[ \t\n\r]+/
)";
  check_lark(json,
        {"{}", R"({"a": [1, -2.5e3, true, null, "x\n\u00e9"]})", "[ {\"日本\" : \"😀\"} ]", "\"s\"", "-0.5"},
        {"", "{", R"({"a" 1})", "01", R"(["\q"])", "[1,]", "\"\xFF\""});
}

TEST(LarkCompiler, Refusals) {
  refused_lark("start: \"a\"\n%ignore \" \"", 11, "directive %ignore is not supported");
  refused_lark("%import common.NUMBER\nstart: NUMBER", 0, "directive %import is not supported");
  refused_lark("start: x\n%declare x", 9, "directive %declare");
  refused_lark("start: %json {}", 7, "directive %json");
  refused_lark("start: foo", 7, "undefined rule 'foo'");
  refused_lark("start: FOO", 7, "undefined terminal 'FOO'");
  refused_lark("begin: \"a\"", 0, "no rule named 'start'");
  refused_lark("start: \"a\"\nstart: \"b\"", 11, "defined twice");
  refused_lark("start: A\nA: a\na: \"x\"", 12, "terminals may use terminals only");
  refused_lark("start: \"abc", 7, "unterminated string");
  refused_lark("start: /abc", 7, "unterminated regex");
  refused_lark("start: /a(?=b)/", 9, "lookahead");
  refused_lark("start: /ab\\1/", 10, "backreference");
  refused_lark("start: /abc/i", 12, "regex flag 'i'");
  refused_lark("start: /[z-a]/", 9, "out of order");
  refused_lark("start: (\"a\"", 7, "missing ')'");
  refused_lark("start: [\"a\"", 7, "missing ']'");
  refused_lark("start: \"a\")", 10, "unmatched ')'");
  refused_lark("start: <|eot|>", 7, "special tokens");
  refused_lark("start: @sub", 7, "grammar references");
  refused_lark("start{x}: x", 5, "templates");
  refused_lark("gen[stop=\"\\n\"]: /.*/\nstart: gen", 3, "rule attributes");
  refused_lark("start \"a\"", 6, "expected ':'");
  refused_lark("start: \"é\"i", 7, "case-insensitive literals must be ASCII");
  refused_lark("start: \"ab\"..\"z\"", 7, "one character on each side");
  refused_lark("start: \"z\"..\"a\"", 7, "out of order");
  refused_lark("start: * \"a\"", 7, "nothing to repeat");
  refused_lark("start: \"a\" ~ 3..1", 11, "n above m");
  refused_lark("start: \"a\"{20000}", 10, "above the limit");
  refused_lark("start: \"\\q\"", 8, "bad escape");
}

TEST(LarkCompiler, RandomTextCompilesOrIsRefused) {
  const std::vector<std::string> pieces = {"start", ": ", "A", ": ", "a", "\"x\"", "\"\\", "/", "/[a-", "]", "[", "(", ")",
                                           "|", "*", "+", "?", "~", " 2", "..", "{", "}", "%ignore", "\n", "//c\n", "->",
                                           "i", "s", "<", "."};
  testing::expect_random_texts_compile_or_are_refused(compile_lark, 6, "start: ", pieces);
}

TEST(LarkCompiler, Limits) {
  const CompileLimits shallow{.max_depth = 3};
  EXPECT_NO_THROW(compile_lark("start: (((\"a\")))", shallow));
  refused_lark("start: [[[[\"a\"]]]]", 10, "nested deeper", shallow);
  refused_lark("start: A{600} A{600}\nA: \"a\"", 14, "grammar too large", {.max_symbols = 1000});
  refused_lark("start: \"a\" ~ 11", 11, "above the limit", {.max_repeat = 10});
}

}  // namespace
}  // namespace deepinfer::grammar

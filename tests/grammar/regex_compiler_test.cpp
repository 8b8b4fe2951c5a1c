// The regex compiler: each feature's accepted and rejected strings (UTF-8 included), anchoring,
// refusals with their byte offsets, the limits; the UTF-8 range sequences exhaustively over all
// code points; and ASCII patterns against std::regex (ECMAScript) over every short string.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "grammar/compile.h"
#include "grammar/compile_util.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "sanitizer_scale.h"

namespace deepinfer::grammar {
namespace {

using detail::CodeSet;

std::string utf8(uint32_t cp) {
  std::string out;
  detail::append_utf8(out, cp);
  return out;
}

// Accepts / rejects every string of the lists, anchored.
void check_regex(std::string_view pattern, const std::vector<std::string>& yes, const std::vector<std::string>& no,
           bool anchored = true) {
  SCOPED_TRACE("pattern: " + std::string(pattern) + (anchored ? " (anchored)" : " (unanchored)"));
  const Grammar g = compile_regex(pattern, anchored);
  g.validate();
  for (const std::string& text : yes) EXPECT_TRUE(matches(g, text)) << "should accept \"" << text << "\"";
  for (const std::string& text : no) EXPECT_FALSE(matches(g, text)) << "should reject \"" << text << "\"";
}

// compile_regex refuses the pattern at byte `offset`, the message containing `reason`.
void refused_regex(std::string_view pattern, std::size_t offset, std::string_view reason, bool anchored = true,
             const CompileLimits& limits = {}) {
  SCOPED_TRACE("pattern: " + std::string(pattern));
  try {
    compile_regex(pattern, anchored, limits);
    ADD_FAILURE() << "compiled, expected a refusal";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.where(), "at byte " + std::to_string(offset)) << e.what();
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
}

// Every string over `alphabet` of at most `max_length` characters, shortest first.
std::vector<std::string> strings_over(const std::string& alphabet, std::size_t max_length) {
  std::vector<std::string> out = {""};
  for (std::size_t begin = 0, length = 0; length < max_length; ++length) {
    const std::size_t end = out.size();
    for (std::size_t i = begin; i < end; ++i)
      for (char c : alphabet) out.push_back(out[i] + c);
    begin = end;
  }
  return out;
}

TEST(Utf8Ranges, SequencesOfEveryScalarValueAreExact) {
  // Each code point's encoding matches exactly one sequence, and the sequences match no more
  // byte strings than there are code points: the union is exactly the UTF-8 of the set.
  std::mt19937 rng(7);
  std::vector<CodeSet> sets = {CodeSet::any(), CodeSet::of('a').complement(), detail::space_set().complement(),
                               CodeSet::range(0x7F, 0x800), CodeSet::range(0xD000, 0xE100),
                               CodeSet::range(0xFFFF, 0x10000)};
  for (int i = 0; i < 6; ++i) {
    CodeSet set;
    for (int k = 0; k < 20; ++k) {
      const uint32_t lo = rng() % 0x110000;
      set.add_range(lo, lo + rng() % (k % 2 ? 0x40 : 0x4000));
    }
    sets.push_back(set);
  }
  for (const CodeSet& set : sets) {
    const std::vector<detail::ByteRanges> sequences = detail::utf8_sequences(set);
    uint64_t strings = 0, members = 0;
    for (const auto& seq : sequences) {
      uint64_t product = 1;
      for (const auto& [lo, hi] : seq) product *= static_cast<uint64_t>(hi - lo + 1);
      strings += product;
    }
    for (uint32_t cp = 0; cp <= detail::kMaxCodePoint; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) {
        EXPECT_FALSE(set.contains(cp));
        continue;
      }
      const std::string bytes = utf8(cp);
      int hits = 0;
      for (const auto& seq : sequences) {
        if (seq.size() != bytes.size()) continue;
        bool in = true;
        for (std::size_t i = 0; i < seq.size() && in; ++i) {
          const auto b = static_cast<uint8_t>(bytes[i]);
          in = b >= seq[i].first && b <= seq[i].second;
        }
        hits += in;
      }
      const bool member = set.contains(cp);
      members += member;
      ASSERT_EQ(hits, member ? 1 : 0) << "U+" << std::hex << cp;
    }
    EXPECT_EQ(strings, members);
  }
}

TEST(Utf8Ranges, DecodeRejectsIllFormedSequences) {
  for (const std::string bad : {"\x80", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF0\x80\x80\x80",
                                "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xFF", "\xC3", "\xE6\x97"}) {
    std::size_t pos = 0;
    uint32_t cp;
    EXPECT_FALSE(detail::decode_utf8(bad, pos, cp));
    EXPECT_EQ(pos, 0u);
  }
  for (uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    const std::string bytes = utf8(cp);
    std::size_t pos = 0;
    uint32_t out = 0;
    EXPECT_TRUE(detail::decode_utf8(bytes, pos, out));
    EXPECT_EQ(out, cp);
    EXPECT_EQ(pos, bytes.size());
  }
}

TEST(Utf8Ranges, CodeSetMergesAndComplements) {
  CodeSet set = CodeSet::range('a', 'c');
  set.add_range('d', 'f');
  set.add('x');
  set.add_range('b', 'e');
  ASSERT_EQ(set.ranges().size(), 2u);
  EXPECT_EQ(set.ranges()[0], (CodeSet::Range{'a', 'f'}));
  EXPECT_EQ(set.complement().complement(), set);
  EXPECT_TRUE(CodeSet::any().complement().empty());
  const CodeSet with_surrogates = CodeSet::range(0xD000, 0xE000);
  EXPECT_FALSE(with_surrogates.contains(0xD800));
  EXPECT_TRUE(with_surrogates.contains(0xD7FF));
  EXPECT_TRUE(with_surrogates.contains(0xE000));
}

TEST(RegexCompiler, Literals) {
  check_regex("abc", {"abc"}, {"", "ab", "abcd", "abd", "xabc", "ABC"});
  check_regex("", {""}, {"a"});
  check_regex("é", {"é"}, {"e", "\xC3", "éé"});
  check_regex("日本", {"日本"}, {"日", "本日", "日本語"});
  check_regex("😀+", {"😀", "😀😀😀"}, {"", "\xF0\x9F\x98", "😀\xF0"});
  check_regex("a\\.b", {"a.b"}, {"axb"});
  check_regex("\\(\\)\\[\\]\\{\\}\\*\\+\\?\\|\\^\\$\\\\\\/\\-", {"()[]{}*+?|^$\\/-"}, {""});
  check_regex("a{", {"a{"}, {"a"});  // not a quantifier: Annex B reads a literal brace
  check_regex("a{1,x}", {"a{1,x}"}, {"a"});
  check_regex("}]", {"}]"}, {"}"});
}

TEST(RegexCompiler, Escapes) {
  check_regex("\\t\\n\\r\\f\\v\\0", {std::string("\t\n\r\f\v") + '\0'}, {"tnrfv0"});
  check_regex("\\x41\\u00e9\\u65E5\\u{1F600}", {"Aé日😀"}, {"A"});
  check_regex("\\uD83D\\uDE00", {"😀"}, {"\xED\xA0\xBD\xED\xB8\x80"});  // a surrogate pair is one code point
  check_regex("\\cJ", {"\n"}, {"cJ"});
  check_regex("\\d", {"0", "5", "9"}, {"a", "", "00", "٣"});
  check_regex("\\D", {"a", "é", "日", "😀", "\n"}, {"0", "", "\xC3", "\xFF"});
  check_regex("\\w+", {"abc_XYZ_09"}, {"", "a-b", "é"});
  check_regex("\\W", {"-", "é", " ", "😀"}, {"a", "_", "0"});
  check_regex("\\s", {" ", "\t", "\n", "\r", "\v", "\f", "\u00a0", "\u2028", "\u3000", "\ufeff"}, {"a", "", "\u200b"});
  check_regex("\\S", {"a", "é", "😀"}, {" ", "\n", "\u00a0", "\u3000"});
}

TEST(RegexCompiler, Dot) {
  check_regex(".", {"a", " ", "é", "日", "😀", "\x7F", "\u0085"},
        {"", "\n", "\r", "\u2028", "\u2029", "ab", "\x80", "\xC3", "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
         "\xF8\x88\x80\x80\x80", "\xFF"});
  check_regex("a.c", {"abc", "aéc", "a日c"}, {"ac", "a\nc", "a\xE6\x97" "c"});
  check_regex("(.|\\n)*", {"", "a\nb", "日本\n"}, {"\xFF"});
}

TEST(RegexCompiler, Classes) {
  check_regex("[abc]", {"a", "b", "c"}, {"d", "", "ab"});
  check_regex("[a-z0-9_]+", {"abc", "a_1", "z9"}, {"", "A", "a-b"});
  check_regex("[^abc]", {"d", "é", "日", "😀", "\n"}, {"a", "b", "c", "", "\xC3", "\xED\xA0\x80"});
  check_regex("[^a-zé]", {"A", "è", "日"}, {"a", "q", "é"});
  check_regex("[é-ë]", {"é", "ê", "ë"}, {"è", "ì", "e"});
  check_regex("[日-本]", {"日", "本", "\u6600"}, {"語", "\u6800"});
  check_regex("[\\d\\s]", {"1", " "}, {"a"});
  check_regex("[^\\d]", {"a", "é"}, {"1"});
  check_regex("[^\\D]", {"1"}, {"a", "é"});
  check_regex("[\\w-]+", {"a-b", "--"}, {"a.b"});
  check_regex("[\\w-.]+", {"a-b.c"}, {"a,b"});  // Annex B: the '-' after a class escape is literal
  check_regex("[-a]", {"-", "a"}, {"b"});
  check_regex("[a-]", {"-", "a"}, {"b"});
  check_regex("[\\]\\\\]", {"]", "\\"}, {"["});
  check_regex("[[]", {"["}, {"]"});
  check_regex("[\\b]", {"\b"}, {"b"});
  check_regex("[\\u00e9\\x41]", {"é", "A"}, {"B"});
  check_regex("[]", {}, {"", "a"});
  check_regex("[^]", {"a", "\n", "日"}, {"", "ab"});
  check_regex("[😀-😂]", {"😀", "😁", "😂"}, {"😃"});
}

TEST(RegexCompiler, GroupsAndAlternation) {
  check_regex("a|b|cd", {"a", "b", "cd"}, {"", "c", "ab"});
  check_regex("(ab)+", {"ab", "abab"}, {"", "a", "aba"});
  check_regex("(?:ab|cd)*e", {"e", "abe", "cdabe"}, {"ab", "ace"});
  check_regex("(?<year>\\d{4})-(?<m>\\d\\d)", {"2024-01"}, {"2024-1"});
  check_regex("a(|b)c", {"ac", "abc"}, {"abbc"});
  check_regex("()", {""}, {"a"});
  check_regex("((((a))))", {"a"}, {""});
  check_regex("(a|)+", {"", "a", "aa"}, {"b"});
}

TEST(RegexCompiler, Quantifiers) {
  check_regex("a*", {"", "a", "aaaa"}, {"b", "ab"});
  check_regex("a+", {"a", "aa"}, {"", "b"});
  check_regex("a?b", {"b", "ab"}, {"aab", ""});
  check_regex("a{3}", {"aaa"}, {"aa", "aaaa"});
  check_regex("a{2,}", {"aa", "aaaaaa"}, {"a", ""});
  check_regex("a{2,4}", {"aa", "aaa", "aaaa"}, {"a", "aaaaa"});
  check_regex("a{0}b", {"b"}, {"ab"});
  check_regex("a{0,1}", {"", "a"}, {"aa"});
  check_regex("a*?b+?c??d{1,2}?", {"bd", "aabbcdd"}, {"abcddd"});
  check_regex("(ab){2}", {"abab"}, {"ab", "ababab"});
  check_regex("é{2}", {"éé"}, {"é", "\xC3\xA9\xA9"});
  check_regex("[a-c]{1,3}x", {"ax", "abcx"}, {"x", "abcax"});
  check_regex("(a{2}){3}", {"aaaaaa"}, {"aaaa", "aaaaaaa"});
  check_regex("x{100}", {std::string(100, 'x')}, {std::string(99, 'x'), std::string(101, 'x')});
}

TEST(RegexCompiler, Anchors) {
  // Anchored: ^ and $ are no-ops.
  check_regex("^abc$", {"abc"}, {"xabc", "abcx"});
  check_regex("^a|b$", {"a", "b"}, {"ab"});
  // Unanchored: a match anywhere, unless ^ / $ pin that side.
  check_regex("abc", {"abc", "xxabcyy", "日abc本"}, {"ab", "", "axbc"}, false);
  check_regex("^abc", {"abc", "abcxx"}, {"xabc"}, false);
  check_regex("abc$", {"abc", "xxabc"}, {"abcx"}, false);
  check_regex("^abc$", {"abc"}, {"xabc", "abcx"}, false);
  check_regex("^a|b$", {"a", "ax", "b", "xb"}, {"xa", "bx", ""}, false);
  check_regex("", {"", "anything", "日本"}, {"\xFF"}, false);
  check_regex("a", {"a\n", "\na"}, {"\n", "a\xFF"}, false);
}

TEST(RegexCompiler, JsonSchemaPatterns) {
  check_regex("^[a-z]+@[a-z]+\\.com$", {"bob@example.com", "a@b.com"},
        {"bob@example.org", "Bob@example.com", "@b.com", "a@b.com ", "a@bcom"}, false);
  check_regex("^\\d{4}-\\d{2}-\\d{2}$", {"2024-12-01", "0000-00-00"}, {"2024-1-01", "2024-12-011", "2024/12/01", "x2024-12-01"},
        false);
  check_regex("\\d{4}-\\d{2}-\\d{2}", {"on 2024-12-01!", "2024-12-01"}, {"2024-12-0"}, false);
  check_regex("^[A-Z]{2}[0-9]{2}[A-Z0-9]{1,30}$", {"GB82WEST12345698765432"}, {"gb82", "GB8"}, false);
  check_regex("^(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}$", {"(888)555-1212", "555-1212"}, {"(888)555-121", "888555-1212"}, false);
  check_regex("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
        {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000"},
        false);
  check_regex("^[^@\\s]+@[^@\\s]+$", {"josé@例え.jp"}, {"a b@c", "a@@b"}, false);
  check_regex("^(https?|ftp)://[^\\s/$.?#].[^\\s]*$", {"https://example.com/x?y=1", "ftp://a.b"}, {"http:/x", "https:// x"},
        false);
  check_regex("^\\+?[1-9]\\d{1,14}$", {"+14155552671", "44"}, {"+0123", "1"}, false);
  check_regex("^[\\u4e00-\\u9fff]+$", {"日本"}, {"日本a", "ひ"}, false);
}

TEST(RegexCompiler, MatchesStdRegexOnShortStrings) {
  // ASCII patterns and inputs: the grammar's language is std::regex_match's (ECMAScript).
  const std::vector<std::string> patterns = {
      "a*b", "(a|b)*c?", "a{2,3}|b", "[^a]*", "(ab|a)(bc|c)", "a?a?aa", ".*\\n?", "[a-c-]+", "(a*)*b",
      "(?:a|bc){1,2}", "[\\s\\w]*", "\\W?a\\D", "a|", "(|a)b", "[^\\n]{0,2}c", "a.{2}", "(a|ab)(c|bcd)",
      "-?[ab]+(-[ab]+)?", "\\-\\.", "[b-c]?a+?"};
  const std::string alphabet = "abc-\n ";
  const std::vector<std::string> inputs = strings_over(alphabet, 4);
  for (const std::string& pattern : patterns) {
    SCOPED_TRACE(pattern);
    const std::regex reference(pattern, std::regex::ECMAScript);
    const Grammar anchored = compile_regex(pattern, true);
    const Grammar search = compile_regex(pattern, false);
    for (const std::string& text : inputs) {
      ASSERT_EQ(matches(anchored, text), std::regex_match(text, reference)) << "anchored, \"" << text << "\"";
      ASSERT_EQ(matches(search, text), std::regex_search(text, reference)) << "unanchored, \"" << text << "\"";
    }
  }
}

// A random ASCII regex over the alphabet "ab1" and newline.
std::string random_regex(std::mt19937& rng, int depth) {
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::string out;
  const int items = 1 + pick(3);
  for (int i = 0; i < items; ++i) {
    static const char* atoms[] = {"a", "b", "1", ".", "[ab]", "[^a]", "\\d", "\\D", "\\w", "\\s", "[a-b1]", "\\n"};
    if (depth > 0 && pick(4) == 0) {
      out += pick(2) ? "(" : "(?:";
      out += random_regex(rng, depth - 1);
      if (pick(2)) out += "|" + random_regex(rng, depth - 1);
      out += ")";
    } else {
      out += atoms[pick(12)];
    }
    static const char* quantifiers[] = {"", "", "", "*", "+", "?", "{2}", "{0,2}", "{1,}", "*?"};
    out += quantifiers[pick(10)];
  }
  if (pick(5) == 0) out += "|" + random_regex(rng, depth > 0 ? depth - 1 : 0);
  return out;
}

TEST(RegexCompiler, MatchesStdRegexOnRandomPatterns) {
  std::mt19937 rng(2024);
  const std::string alphabet = "ab1\n";
  const std::vector<std::string> inputs = strings_over(alphabet, 4);
  for (int n = 0; n < deepinfer::testing::release_or_sanitized(100, 25); ++n) {
    const std::string pattern = random_regex(rng, 2);
    SCOPED_TRACE(pattern);
    const std::regex reference(pattern, std::regex::ECMAScript);
    const Grammar anchored = compile_regex(pattern, true);
    const Grammar search = compile_regex(pattern, false);
    for (const std::string& text : inputs) {
      ASSERT_EQ(matches(anchored, text), std::regex_match(text, reference)) << "anchored, \"" << text << "\"";
      ASSERT_EQ(matches(search, text), std::regex_search(text, reference)) << "unanchored, \"" << text << "\"";
    }
  }
}

TEST(RegexCompiler, RandomBytesCompileOrAreRefused) {
  // Never a crash or another exception: a grammar that validates, or a CompileError.
  std::mt19937 rng(99);
  const std::string soup = "ab()[]{}|^$\\*+?.-,0129dDwWsSbBux:=!<>k\xC3\xA9\xFF";
  for (int n = 0; n < 3000; ++n) {
    std::string pattern;
    for (unsigned i = 0, length = rng() % 12; i < length; ++i) pattern += soup[rng() % soup.size()];
    for (bool anchored : {true, false}) {
      try {
        compile_regex(pattern, anchored).validate();
      } catch (const CompileError& e) {
        EXPECT_TRUE(e.where().starts_with("at byte ")) << pattern;
      }
    }
  }
}

TEST(RegexCompiler, Refusals) {
  refused_regex("(a)\\1", 3, "backreference");
  refused_regex("(?<n>a)\\k<n>", 7, "backreference");
  refused_regex("a(?=b)", 1, "lookahead");
  refused_regex("a(?!b)", 1, "lookahead");
  refused_regex("(?<=a)b", 0, "lookbehind");
  refused_regex("(?<!a)b", 0, "lookbehind");
  refused_regex("\\bword\\b", 0, "word boundaries");
  refused_regex("a\\B", 1, "word boundaries");
  refused_regex("a^b", 1, "^");
  refused_regex("a$b", 1, "$");
  refused_regex("(^a)", 1, "^");
  refused_regex("(a$)", 2, "$");
  refused_regex("(ab", 0, "missing ')'");
  refused_regex("a(b(c)", 1, "missing ')'");
  refused_regex("ab)", 2, "unmatched ')'");
  refused_regex("[z-a]", 1, "out of order");
  refused_regex("x[é-a]", 2, "out of order");
  refused_regex("[abc", 0, "unterminated character class");
  refused_regex("\\q", 0, "bad escape");
  refused_regex("a\\", 1, "end of the pattern");
  refused_regex("\\x4", 0, "two hex digits");
  refused_regex("\\u12", 0, "four hex digits");
  refused_regex("\\uD800", 0, "surrogate");
  refused_regex("\\u{110000}", 0, "10FFFF");
  refused_regex("\\p{L}", 0, "property");
  refused_regex("*a", 0, "nothing to repeat");
  refused_regex("a|+", 2, "nothing to repeat");
  refused_regex("(?:*)", 3, "nothing to repeat");
  refused_regex("a**", 2, "nothing to repeat");
  refused_regex("a{2}{3}", 4, "nothing to repeat");
  refused_regex("{2}", 0, "nothing to repeat");
  refused_regex("^*", 1, "nothing to repeat");
  refused_regex("a{3,2}", 1, "out of order");
  refused_regex("(?i)a", 0, "flags");
  refused_regex("ab\xFF", 2, "UTF-8");
  refused_regex("[\\B]", 1, "bad escape");
}

TEST(RegexCompiler, Limits) {
  CompileLimits limits;
  limits.max_repeat = 100;
  refused_regex("a{101}", 1, "above the limit", true, limits);
  refused_regex("a{1,101}", 1, "above the limit", true, limits);
  refused_regex("a{99999999999999999999}", 1, "above the limit");
  EXPECT_NO_THROW(compile_regex("a{100}", true, limits));

  limits = {};
  limits.max_depth = 3;
  EXPECT_NO_THROW(compile_regex("(((a)))", true, limits));
  refused_regex("((((a))))", 3, "nested deeper", true, limits);
  // Deep nesting far past the limit stops at the limit, no stack overflow.
  refused_regex(std::string(100000, '(') + "a" + std::string(100000, ')'), 32, "nested deeper");

  limits = {};
  limits.max_symbols = 1000;
  refused_regex("a{990}b{990}", 6, "grammar too large", true, limits);
  refused_regex("(a{600}){600}", 0, "grammar too large", true, limits);
  EXPECT_NO_THROW(compile_regex("(a{200}){200}", true, limits));
  refused_regex(std::string(5000, 'a'), 1000, "grammar too large", true, limits);
  // Nested repetition stays linear: the inner expansion is a rule the outer one repeats.
  const Grammar nested = compile_regex("((a{100}){100}){100}");
  EXPECT_LT(nested.size(), 2000);
  EXPECT_TRUE(matches(compile_regex("(a{10}){10}"), std::string(100, 'a')));
  EXPECT_FALSE(matches(compile_regex("(a{10}){10}"), std::string(99, 'a')));
  // Every default-limit grammar stays within the bound.
  const Grammar big = compile_regex("[^a]{10000}");
  EXPECT_LE(big.size(), CompileLimits{}.max_symbols);
}

}  // namespace
}  // namespace deepinfer::grammar

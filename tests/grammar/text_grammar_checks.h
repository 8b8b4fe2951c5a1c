#pragma once
// The checks that the tests of the text-grammar compilers (GBNF, Lark) make alike, over the
// compiler under test: the language a grammar text accepts, the refusals with their byte
// offsets, and random texts that must compile or be refused cleanly.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compile.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar::testing {

using TextGrammarCompiler = Grammar (*)(std::string_view text, const CompileLimits& limits);

// check(text, yes, no): the grammar of `text` accepts every string of `yes` and none of `no`.
struct LanguageCheck {
  TextGrammarCompiler compile;

  void operator()(std::string_view text, const std::vector<std::string>& yes, const std::vector<std::string>& no) const {
    SCOPED_TRACE("grammar:\n" + std::string(text));
    const Grammar g = compile(text, {});
    g.validate();
    for (const std::string& s : yes) EXPECT_TRUE(matches(g, s)) << "should accept \"" << s << "\"";
    for (const std::string& s : no) EXPECT_FALSE(matches(g, s)) << "should reject \"" << s << "\"";
  }
};

// refused(text, offset, reason): `text` is refused at byte `offset`, the message containing `reason`.
struct RefusalCheck {
  TextGrammarCompiler compile;

  void operator()(std::string_view text, std::size_t offset, std::string_view reason,
                  const CompileLimits& limits = {}) const {
    SCOPED_TRACE("grammar:\n" + std::string(text));
    try {
      compile(text, limits);
      ADD_FAILURE() << "compiled, expected a refusal";
    } catch (const CompileError& e) {
      EXPECT_EQ(e.where(), "at byte " + std::to_string(offset)) << e.what();
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  }
};

// 3000 texts of `prefix` and up to 9 random `pieces` each compile to a valid grammar or are
// refused with a byte offset: never a crash, a hang or another kind of error.
inline void expect_random_texts_compile_or_are_refused(TextGrammarCompiler compile, unsigned seed,
                                                       const std::string& prefix,
                                                       const std::vector<std::string>& pieces) {
  std::mt19937 rng(seed);
  for (int n = 0; n < 3000; ++n) {
    std::string text = prefix;
    for (unsigned i = 0, length = rng() % 10; i < length; ++i) text += pieces[rng() % pieces.size()];
    try {
      compile(text, {}).validate();
    } catch (const CompileError& e) {
      EXPECT_TRUE(e.where().starts_with("at byte ")) << text;
    }
  }
}

}  // namespace deepinfer::grammar::testing

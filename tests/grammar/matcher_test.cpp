// The Earley matcher on hand-built grammars: acceptance (ambiguity, left recursion, nullable
// rules), masks over a small vocabulary against brute force, EOS only when accepting, rollback,
// and jump-forward bytes.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar {
namespace {

// S -> "(" S ")" S | ""
Grammar balanced() {
  Grammar g;
  const RuleId s = g.add_rule("S");
  Sequence open = g.literal("(");
  open.push_back(Grammar::rule(s));
  const Sequence close = g.literal(")");
  open.insert(open.end(), close.begin(), close.end());
  open.push_back(Grammar::rule(s));
  g.add_alternative(s, open);
  g.add_alternative(s, {});
  g.set_start(s);
  return g;
}

// E -> E "+" N | N ; N -> [0-9] N | [0-9]   (left recursive)
Grammar sums() {
  Grammar g;
  const RuleId e = g.add_rule("E");
  const RuleId n = g.add_rule("N");
  Sequence plus{Grammar::rule(e)};
  plus.push_back(g.terminal(ByteSet::of('+')));
  plus.push_back(Grammar::rule(n));
  g.add_alternative(e, plus);
  g.add_alternative(e, {Grammar::rule(n)});
  const Symbol digit = g.terminal(ByteSet::range('0', '9'));
  g.add_alternative(n, {digit, Grammar::rule(n)});
  g.add_alternative(n, {digit});
  g.set_start(e);
  return g;
}

// Nullable chains: S -> A B "x" ; A -> B B ; B -> "" | "b"
Grammar nullable_chain() {
  Grammar g;
  const RuleId s = g.add_rule("S");
  const RuleId a = g.add_rule("A");
  const RuleId b = g.add_rule("B");
  Sequence top{Grammar::rule(a), Grammar::rule(b)};
  top.push_back(g.terminal(ByteSet::of('x')));
  g.add_alternative(s, top);
  g.add_alternative(a, {Grammar::rule(b), Grammar::rule(b)});
  g.add_alternative(b, {});
  g.add_alternative(b, g.literal("b"));
  g.set_start(s);
  return g;
}

TEST(GrammarMatcher, AcceptsExactlyTheLanguage) {
  const Grammar g = balanced();
  for (const char* yes : {"", "()", "(())", "()()", "(()())()"}) EXPECT_TRUE(matches(g, yes)) << yes;
  for (const char* no : {"(", ")", "(()", "())(", "x"}) EXPECT_FALSE(matches(g, no)) << no;
  const Grammar s = sums();
  for (const char* yes : {"1", "12+3", "1+2+30"}) EXPECT_TRUE(matches(s, yes)) << yes;
  for (const char* no : {"", "+", "1+", "1++2", "a"}) EXPECT_FALSE(matches(s, no)) << no;
  const Grammar c = nullable_chain();
  for (const char* yes : {"x", "bx", "bbx", "bbbx"}) EXPECT_TRUE(matches(c, yes)) << yes;
  for (const char* no : {"", "b", "bbbbx", "xb"}) EXPECT_FALSE(matches(c, no)) << no;
}

TEST(GrammarMatcher, ValidateRefusesBrokenGrammars) {
  Grammar g;
  EXPECT_THROW(g.validate(), Error);
  const RuleId r = g.add_rule("r");
  g.set_start(r);
  EXPECT_THROW(g.validate(), Error);  // no alternative
  g.add_alternative(r, {Grammar::rule(7)});
  EXPECT_THROW(g.validate(), Error);  // names a missing rule
}

// Counted rules (a bounded string's counts) keep their counts and families through include(),
// each included grammar's families apart from the others'.
TEST(GrammarMatcher, IncludeKeepsCountedFamiliesApart) {
  Grammar part;
  const int32_t family = part.add_counted_family();
  const RuleId last = part.add_rule("last"), first = part.add_rule("first");
  part.add_alternative(last, part.literal("x"));
  part.add_alternative(first, {part.terminal(ByteSet::of('x')), Grammar::rule(last)});
  part.set_counted(first, {family, 1, 2, true});
  part.set_counted(last, {family, 0, 1, true});
  part.set_start(first);
  Grammar whole;
  const int32_t own = whole.add_counted_family();
  const RuleId a = whole.include(part), b = whole.include(part);
  EXPECT_EQ(whole.counted(a).family, own + 1);
  EXPECT_EQ(whole.counted(b).family, own + 2);
  EXPECT_EQ(whole.counted(a).to_min, 1);
  EXPECT_EQ(whole.counted(a).to_max, 2);
  EXPECT_TRUE(whole.counted(a).any_text);
  EXPECT_EQ(whole.counted(a - 1).family, own + 1) << "the copy of `last`, added just before `first`'s";
  EXPECT_EQ(whole.counted(whole.add_rule("plain")).family, -1);
}

std::vector<std::string> small_vocabulary() {
  return {"(", ")", "()", "((", "))", "())", "x", "(x", "", "<eos>", "<special>", ")(", "(((", "1", "+", "12", "+3"};
}

bool allowed(const std::vector<uint64_t>& mask, int32_t id) { return (mask[id / 64] >> (id % 64)) & 1; }

// Brute force: a token is allowed when the matcher accepts it (then rolled back).
TEST(GrammarMatcher, MaskEqualsTryingEveryToken) {
  for (const Grammar& g : {balanced(), sums()}) {
    auto vocabulary = std::make_shared<Vocabulary>(small_vocabulary(), std::vector<int32_t>{10}, 9);
    Matcher matcher(prepare(g), vocabulary);
    std::mt19937 rng(3);
    for (int step = 0; step < 12; ++step) {
      std::vector<uint64_t> mask(1);
      matcher.fill_mask(mask);
      std::vector<int32_t> ok;
      for (int32_t id = 0; id < vocabulary->size(); ++id) {
        const bool accepted = matcher.accept_token(id);
        if (accepted) {
          matcher.rollback(1);
          ok.push_back(id);
        }
        // The empty token never appears in a mask (it would change nothing).
        const bool expected = accepted && (id == vocabulary->eos() || !vocabulary->bytes(id).empty());
        EXPECT_EQ(allowed(mask, id), expected)
            << "step " << step << " token " << id << " '" << vocabulary->bytes(id) << "'";
      }
      EXPECT_FALSE(allowed(mask, 10)) << "a special token is never allowed";
      // Take a random allowed token that is not EOS, else stop.
      std::erase(ok, 9);
      std::erase_if(ok, [&](int32_t id) { return vocabulary->bytes(id).empty(); });
      if (ok.empty()) break;
      ASSERT_TRUE(matcher.accept_token(ok[rng() % ok.size()]));
    }
  }
}

TEST(GrammarMatcher, EndOfSequenceOnlyWhenAccepting) {
  auto vocabulary = std::make_shared<Vocabulary>(small_vocabulary(), std::vector<int32_t>{10}, 9);
  Matcher matcher(prepare(balanced()), vocabulary);
  EXPECT_TRUE(matcher.accepting());
  ASSERT_TRUE(matcher.accept_token(0));  // "("
  EXPECT_FALSE(matcher.accepting());
  EXPECT_FALSE(matcher.accept_token(9));
  ASSERT_TRUE(matcher.accept_token(1));  // ")"
  EXPECT_TRUE(matcher.accept_token(9));
  EXPECT_TRUE(matcher.finished());
  std::vector<uint64_t> mask(1);
  matcher.fill_mask(mask);
  EXPECT_EQ(mask[0], 0u) << "nothing after EOS";
  matcher.rollback(1);
  EXPECT_FALSE(matcher.finished());
  EXPECT_TRUE(matcher.accept_token(0));
}

TEST(GrammarMatcher, RollbackRestoresEarlierStates) {
  auto vocabulary = std::make_shared<Vocabulary>(small_vocabulary(), std::vector<int32_t>{}, 9);
  Matcher matcher(prepare(balanced()), vocabulary);
  std::vector<uint64_t> start(1), later(1), again(1);
  matcher.fill_mask(start);
  ASSERT_TRUE(matcher.accept_token(3));  // "(("
  ASSERT_TRUE(matcher.accept_token(1));  // ")"
  matcher.fill_mask(later);
  EXPECT_NE(start, later);
  matcher.rollback(2);
  matcher.fill_mask(again);
  EXPECT_EQ(start, again);
  EXPECT_THROW(matcher.rollback(1), Error);
  int64_t rejected_at = -1;
  EXPECT_FALSE(matcher.accept_bytes("(()))", &rejected_at));
  EXPECT_EQ(rejected_at, 4);
  matcher.fill_mask(again);
  EXPECT_EQ(start, again) << "a rejected append changes nothing";
}

TEST(GrammarMatcher, ForcedBytesFollowTheOnlyPath) {
  Grammar g;
  const RuleId s = g.add_rule("S");
  Sequence a = g.literal("{\"name\": \"");
  a.push_back(g.terminal(ByteSet::range('a', 'z')));
  g.add_alternative(s, a);
  g.set_start(s);
  Matcher matcher(prepare(g), nullptr);
  EXPECT_EQ(matcher.forced_bytes(), "{\"name\": \"");
  ASSERT_TRUE(matcher.accept_bytes("{\"na"));
  EXPECT_EQ(matcher.forced_bytes(), "me\": \"");
  ASSERT_TRUE(matcher.accept_bytes("me\": \"q"));
  EXPECT_EQ(matcher.forced_bytes(), "");
  EXPECT_TRUE(matcher.accepting());
}

}  // namespace
}  // namespace deepinfer::grammar

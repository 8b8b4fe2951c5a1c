// The bounds that keep a pathological constraint from hanging or exhausting the server: the wall
// clock (CompileDeadline, checked inside the compilers and prepare), memory (max_bytes on the
// grammar, the prepared tables and each automaton), and prepare's own work staying linear.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "sanitizer_scale.h"

namespace deepinfer::grammar {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// A huge alternation: `root ::= "w0" | "w1" | ...`.
std::string huge_alternation(int branches) {
  std::string text = "root ::= \"w0\"";
  for (int i = 1; i < branches; ++i) text += " | \"w" + std::to_string(i) + "\"";
  return text;
}

// A 10,000-branch enum inside nested anyOfs, as a JSON schema.
nlohmann::ordered_json big_enum_schema() {
  nlohmann::ordered_json values = nlohmann::ordered_json::array();
  for (int i = 0; i < 10000; ++i) values.push_back("value-" + std::to_string(i * 7919));
  nlohmann::ordered_json schema = {{"enum", values}};
  for (int depth = 0; depth < 4; ++depth) schema = {{"anyOf", {schema, {{"type", "integer"}}}}};
  return schema;
}

TEST(CompileDeadline, AHugeAlternationStopsAtTheBound) {
  const std::string text = huge_alternation(100000);
  const auto unbounded_start = Clock::now();
  (void)compile_gbnf(text);
  const double unbounded_ms = elapsed_ms(unbounded_start);
  ASSERT_GT(unbounded_ms, 5.0) << "the input must take longer than the bound for the test to mean anything";

  const CompileDeadline deadline(milliseconds(1));
  CompileLimits limits;
  limits.deadline = &deadline;
  const auto start = Clock::now();
  EXPECT_THROW((void)compile_gbnf(text, limits), CompileTimeout);
  // Well inside the unbounded time (a check every 64 alternatives; sanitizer builds are slower).
  EXPECT_LT(elapsed_ms(start), 1.0 + unbounded_ms / 2) << "unbounded: " << unbounded_ms << " ms";
}

TEST(CompileDeadline, ABigEnumSchemaStopsAtTheBound) {
  const nlohmann::ordered_json schema = big_enum_schema();
  const auto unbounded_start = Clock::now();
  (void)compile_json_schema(schema);
  const double unbounded_ms = elapsed_ms(unbounded_start);
  ASSERT_GT(unbounded_ms, 5.0);

  const CompileDeadline deadline(milliseconds(1));
  CompileLimits limits;
  limits.deadline = &deadline;
  const auto start = Clock::now();
  EXPECT_THROW((void)compile_json_schema(schema, {}, limits), CompileTimeout);
  EXPECT_LT(elapsed_ms(start), 1.0 + unbounded_ms / 2) << "unbounded: " << unbounded_ms << " ms";
}

TEST(CompileDeadline, AnAutomatonBlowUpStopsAtTheBound) {
  // (a|b)*a(a|b){n}: the pattern's DFA has 2^(n+1) states; its length bound intersects it again.
  const nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", "^(a|b)*a(a|b){13}$"}, {"maxLength", 60}};
  const CompileDeadline deadline(milliseconds(1));
  CompileLimits limits;
  limits.deadline = &deadline;
  const auto start = Clock::now();
  try {
    (void)compile_json_schema(schema, {}, limits);
    ADD_FAILURE() << "compiled within 1 ms: not the blow-up the test needs";
  } catch (const CompileTimeout&) {
  } catch (const CompileError& error) {
    ADD_FAILURE() << "a timeout must not turn into the input's refusal: " << error.what();
  }
  EXPECT_LT(elapsed_ms(start), 2000.0);
}

TEST(CompileDeadline, ATimeoutIsNotACompileError) {
  // Callers cache CompileErrors as the input's verdict and compilers catch them to try another
  // way: a timeout must pass through both.
  const CompileTimeout timeout(milliseconds(5));
  const Error& as_error = timeout;
  EXPECT_EQ(dynamic_cast<const CompileError*>(&as_error), nullptr);
  EXPECT_NE(std::string(timeout.what()).find("5 ms"), std::string::npos);
}

TEST(CompileMemory, PrepareRefusesTablesAboveTheBound) {
  const Grammar grammar = compile_gbnf(huge_alternation(2000));
  CompileLimits limits;
  limits.max_bytes = 10000;
  try {
    (void)prepare(grammar, limits);
    ADD_FAILURE() << "prepared a grammar of " << grammar.bytes() << " bytes within 10000";
  } catch (const CompileError& error) {
    EXPECT_NE(std::string(error.what()).find("above the limit of 10000"), std::string::npos) << error.what();
  }
  const auto prepared = prepare(grammar);
  EXPECT_GT(prepared_bytes(*prepared), grammar.bytes());
}

TEST(CompileMemory, CompilersRefuseAGrammarAboveTheBound) {
  CompileLimits limits;
  limits.max_bytes = 64 << 10;
  EXPECT_THROW((void)compile_gbnf(huge_alternation(20000), limits), CompileError);
  EXPECT_THROW((void)compile_json_schema(big_enum_schema(), {}, limits), CompileError);
  EXPECT_NO_THROW((void)compile_json_schema(nlohmann::ordered_json{{"type", "integer"}}, {}, limits));
}

TEST(CompileMemory, AnAutomatonAboveTheBoundIsRefused) {
  const nlohmann::ordered_json schema = {{"type", "string"}, {"pattern", "^(a|b)*a(a|b){9}$"}};
  EXPECT_NO_THROW((void)compile_json_schema(schema));
  CompileLimits limits;
  limits.max_bytes = 16 << 10;  // the 1,024-state automaton's table is larger
  EXPECT_THROW((void)compile_json_schema(schema, {}, limits), CompileError);
}

TEST(Prepare, ANullableChainIsLinear) {
  // root ::= r1, r1 ::= r2, ..., rN ::= "": defined first to last, a fixpoint of passes over the
  // rules needs N passes (quadratic: minutes at this size); the worklist is one pass. A fifth of
  // the rules under the sanitizers (sanitizer_scale.h), where building them took most of 20 s; a
  // quadratic pass would still take seconds there.
  constexpr int kRules = deepinfer::testing::release_or_sanitized(100000, 20000);
  std::string text = "root ::= r1\n";
  for (int i = 1; i < kRules; ++i) text += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  text += "r" + std::to_string(kRules) + " ::= \"\"\n";
  const Grammar grammar = compile_gbnf(text);
  const CompileDeadline deadline(milliseconds(5000));
  CompileLimits limits;
  limits.deadline = &deadline;
  const auto start = Clock::now();
  const auto prepared = prepare(grammar, limits);
  EXPECT_LT(elapsed_ms(start), 1000.0);
  Matcher matcher(prepared, nullptr);
  EXPECT_TRUE(matcher.accepting());
  EXPECT_FALSE(matcher.accept_bytes("x"));
}

}  // namespace
}  // namespace deepinfer::grammar

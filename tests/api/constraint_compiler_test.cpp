// ConstraintCompiler, the server's cache of compiled constraints: a compile past the time bound
// is a 400 within the bound and is not cached; a refusal is cached; concurrent requests with one
// new constraint compile it once; memory bounds (one grammar, the whole cache) hold.
#include "api/output_constraint.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "api/api_error.h"

namespace deepinfer::api {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::shared_ptr<const grammar::Vocabulary> small_vocabulary() {
  std::vector<std::string> tokens = {"{", "}", "\"", ":", ",", "a", "b", "1", "true", " ", "w"};
  return std::make_shared<const grammar::Vocabulary>(tokens, std::vector<int32_t>{}, -1);
}

ConstraintSpec gbnf(std::string text) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::Gbnf;
  spec.text = std::move(text);
  spec.field = "structured_outputs.grammar";
  return spec;
}

ConstraintSpec json_schema(nlohmann::ordered_json schema) {
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::JsonSchema;
  spec.schema = std::move(schema);
  spec.field = "response_format.json_schema.schema";
  return spec;
}

// A huge alternation (within the symbol limit), slow to compile: tens of milliseconds.
ConstraintSpec pathological() {
  std::string text = "root ::= \"w0\"";
  for (int i = 1; i < 100000; ++i) text += " | \"w" + std::to_string(i) + "\"";
  return gbnf(std::move(text));
}

TEST(ConstraintCompiler, ACompilePastTheTimeBoundIsA400WithinTheBoundAndNotCached) {
  ConstraintCompilerOptions options;
  options.timeout = milliseconds(2);
  ConstraintCompiler compiler(small_vocabulary(), options);
  const ConstraintSpec spec = pathological();
  for (int attempt = 1; attempt <= 2; ++attempt) {
    const auto start = Clock::now();
    try {
      (void)compiler.compile(spec, -1);
      ADD_FAILURE() << "compiled within 2 ms";
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status(), 400);
      EXPECT_EQ(error.param(), "structured_outputs.grammar");
      EXPECT_NE(std::string(error.what()).find("longer than the limit of 2 ms"), std::string::npos) << error.what();
    }
    const double elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    EXPECT_LT(elapsed_ms, 500.0);
    // The timeout says nothing about the input: the next request compiles it again.
    const ConstraintCompiler::Stats stats = compiler.stats();
    EXPECT_EQ(stats.compilations, attempt);
    EXPECT_EQ(stats.timeouts, attempt);
    EXPECT_EQ(stats.hits, 0);
    EXPECT_EQ(stats.entries, 0);
  }
}

TEST(ConstraintCompiler, TheSameConstraintCompilesWithinAGenerousBound) {
  ConstraintCompilerOptions options;
  options.timeout = milliseconds(60000);
  ConstraintCompiler compiler(small_vocabulary(), options);
  EXPECT_NO_THROW((void)compiler.compile(pathological(), -1));
  EXPECT_EQ(compiler.stats().timeouts, 0);
  EXPECT_EQ(compiler.stats().entries, 1);
}

TEST(ConstraintCompiler, ARefusalIsCachedAsTheInputsVerdict) {
  ConstraintCompiler compiler(small_vocabulary());
  const ConstraintSpec spec = json_schema({{"type", "array"}, {"uniqueItems", true}});
  for (int attempt = 0; attempt < 3; ++attempt) {
    try {
      (void)compiler.compile(spec, -1);
      ADD_FAILURE() << "uniqueItems compiled";
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status(), 400);
      EXPECT_EQ(error.param(), "response_format.json_schema.schema");
      EXPECT_NE(std::string(error.what()).find("uniqueItems"), std::string::npos) << error.what();
    }
  }
  EXPECT_EQ(compiler.stats().compilations, 1);
  EXPECT_EQ(compiler.stats().hits, 2);
}

TEST(ConstraintCompiler, ACachedRefusalNamesTheFieldOfEachRequest) {
  ConstraintCompiler compiler(small_vocabulary());
  ConstraintSpec spec = json_schema({{"type", "array"}, {"uniqueItems", true}});
  for (const char* field : {"response_format.json_schema.schema", "structured_outputs.json",
                            "response_format.json_schema.schema"}) {
    spec.field = field;
    try {
      (void)compiler.compile(spec, -1);
      ADD_FAILURE() << "uniqueItems compiled";
    } catch (const ApiError& error) {
      EXPECT_EQ(error.param(), field);
      EXPECT_EQ(std::string(error.what()).rfind(field, 0), 0u) << error.what();
    }
  }
  EXPECT_EQ(compiler.stats().compilations, 2);
}

TEST(ConstraintCompiler, ConcurrentRequestsWithOneNewConstraintCompileItOnce) {
  constexpr int kThreads = 8;
  ConstraintCompiler compiler(small_vocabulary());
  // The first compile waits until every other request has joined it, so they overlap for sure.
  compiler.set_compile_hook([&] {
    const auto give_up = Clock::now() + std::chrono::seconds(20);
    while (compiler.stats().waits < kThreads - 1 && Clock::now() < give_up)
      std::this_thread::sleep_for(milliseconds(1));
  });
  const ConstraintSpec spec = json_schema(
      {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}});
  std::vector<std::shared_ptr<const grammar::CompiledGrammar>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { results[static_cast<std::size_t>(t)] = compiler.compile(spec, -1).grammar; });
  for (std::thread& thread : threads) thread.join();
  const ConstraintCompiler::Stats stats = compiler.stats();
  EXPECT_EQ(stats.compilations, 1);
  EXPECT_EQ(stats.waits, kThreads - 1);
  for (const auto& result : results) {
    ASSERT_NE(result, nullptr);
    EXPECT_EQ(result, results.front());
  }
}

TEST(ConstraintCompiler, RequestsWaitingOnACompileThatTimesOutGetThe400Too) {
  constexpr int kThreads = 4;
  ConstraintCompilerOptions options;
  options.timeout = milliseconds(2);
  ConstraintCompiler compiler(small_vocabulary(), options);
  compiler.set_compile_hook([&] {
    const auto give_up = Clock::now() + std::chrono::seconds(20);
    while (compiler.stats().waits < kThreads - 1 && Clock::now() < give_up)
      std::this_thread::sleep_for(milliseconds(1));
  });
  const ConstraintSpec spec = pathological();
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      try {
        (void)compiler.compile(spec, -1);
      } catch (const ApiError& error) {
        if (error.status() == 400 && error.param() == spec.field) ++refused;
      }
    });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(refused.load(), kThreads);
  EXPECT_EQ(compiler.stats().compilations, 1);
  EXPECT_EQ(compiler.stats().entries, 0);
}

TEST(ConstraintCompiler, AnUnexpectedErrorIsNotCachedAndLeavesNoEntryPending) {
  ConstraintCompiler compiler(small_vocabulary());
  int calls = 0;
  compiler.set_compile_hook([&] {
    if (++calls == 1) throw std::runtime_error("out of something");
  });
  const ConstraintSpec spec = json_schema({{"type", "integer"}});
  EXPECT_THROW((void)compiler.compile(spec, -1), std::runtime_error);
  EXPECT_EQ(compiler.stats().entries, 0);
  EXPECT_NE(compiler.compile(spec, -1).grammar, nullptr);  // compiles again, nobody waits forever
  EXPECT_EQ(compiler.stats().compilations, 2);
}

TEST(ConstraintCompiler, ACompileWaitingForASlotWaitsWithinItsTimeBound) {
  ConstraintCompilerOptions options;
  options.max_concurrent_compiles = 1;
  options.timeout = milliseconds(50);
  ConstraintCompiler compiler(small_vocabulary(), options);
  std::promise<void> second_done;
  std::shared_future<void> second_finished = second_done.get_future().share();
  std::atomic<int> calls{0};
  // The first compile holds the only slot until the second request has been answered.
  compiler.set_compile_hook([&] {
    if (++calls == 1) second_finished.wait_for(std::chrono::seconds(20));
  });
  std::thread first([&] {
    try {  // held past its own bound, it may time out too: what matters is the slot it holds
      (void)compiler.compile(json_schema({{"type", "integer"}}), -1);
    } catch (const ApiError&) {
    }
  });
  const auto give_up = Clock::now() + std::chrono::seconds(20);
  while (calls.load() == 0 && Clock::now() < give_up) std::this_thread::sleep_for(milliseconds(1));
  const auto start = Clock::now();
  try {
    (void)compiler.compile(json_schema({{"type", "boolean"}}), -1);
    ADD_FAILURE() << "compiled with the only slot taken";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status(), 400);
    EXPECT_NE(std::string(error.what()).find("longer than the limit of 50 ms"), std::string::npos) << error.what();
  }
  const double waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  second_done.set_value();
  first.join();
  EXPECT_GE(waited_ms, 45.0);
  EXPECT_LT(waited_ms, 1000.0);
  EXPECT_GE(compiler.stats().timeouts, 1);
  EXPECT_EQ(calls.load(), 1) << "the second compile started without a slot";
  EXPECT_NO_THROW((void)compiler.compile(json_schema({{"type", "boolean"}}), -1));  // the slot is free again
}

TEST(ConstraintCompiler, AGrammarAboveTheMemoryBoundIsA400NamingTheField) {
  ConstraintCompilerOptions options;
  options.max_grammar_bytes = 32 << 10;
  ConstraintCompiler compiler(small_vocabulary(), options);
  nlohmann::ordered_json properties = nlohmann::ordered_json::object();
  for (int i = 0; i < 400; ++i) properties["key_" + std::to_string(i)] = {{"type", "string"}};
  try {
    (void)compiler.compile(json_schema({{"type", "object"}, {"properties", properties}}), -1);
    ADD_FAILURE() << "compiled within 32 KiB";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status(), 400);
    EXPECT_EQ(error.param(), "response_format.json_schema.schema");
    EXPECT_NE(std::string(error.what()).find("bytes"), std::string::npos) << error.what();
  }
  EXPECT_NO_THROW((void)compiler.compile(json_schema({{"type", "integer"}}), -1));
}

TEST(ConstraintCompiler, TheCacheStaysWithinItsByteBudget) {
  ConstraintCompilerOptions options;
  const auto vocabulary = small_vocabulary();
  options.cache_bytes = 3 * grammar::mask_cache_bytes(vocabulary->size()) + (64 << 10);
  ConstraintCompiler compiler(vocabulary, options);
  for (int i = 0; i < 20; ++i) {
    const auto constraint = compiler.compile(json_schema({{"type", "integer"}, {"minimum", i}}), -1);
    EXPECT_NE(constraint.grammar, nullptr);  // an entry the cache drops still serves its request
    EXPECT_LE(compiler.stats().bytes, options.cache_bytes);
  }
  EXPECT_LT(compiler.stats().entries, 20);
  EXPECT_GT(compiler.stats().entries, 0);
}

}  // namespace
}  // namespace deepinfer::api

// A pathological constraint through the server: its compile runs on its own request's HTTP
// thread, never on the engine's, so another request is served while it compiles; past
// --grammar-compile-timeout it is a 400 naming the field, and the server goes on serving.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

Json chat_body(const Json& extra) {
  Json body = {{"model", "tiny"},
               {"max_tokens", 8},
               {"temperature", 0.0},
               {"thinking", {{"type", "disabled"}}},
               {"messages", {{{"role", "user"}, {"content", "Hello"}}}}};
  body.update(extra);
  return body;
}

// A 10,000-branch enum under nested anyOfs: hundreds of milliseconds to compile, far more than
// the test's bound.
Json big_enum_schema() {
  Json values = Json::array();
  for (int i = 0; i < 10000; ++i) values.push_back("value-" + std::to_string(i * 7919));
  Json schema = {{"enum", values}};
  for (int depth = 0; depth < 4; ++depth) schema = {{"anyOf", {schema, {{"type", "integer"}}}}};
  return schema;
}

TEST(ConstraintCompileBounds, APathologicalConstraintIsA400WhileAnotherRequestIsServed) {
  ServerOptions options = test_options();
  options.constraints.timeout = std::chrono::milliseconds(20);
  RunningServer running(options);
  api::ConstraintCompiler& compiler = running.server().model().constraints();

  // The pathological compile is held at its start until the other request is answered, so the
  // two overlap for sure (the time bound starts after the hold).
  std::promise<void> other_served;
  std::shared_future<void> served = other_served.get_future().share();
  compiler.set_compile_hook([served] { served.wait_for(std::chrono::seconds(30)); });

  std::promise<std::pair<int, Json>> refused;
  std::thread pathological([&] {
    const Json body = chat_body({{"structured_outputs", {{"json", big_enum_schema()}}}});
    const auto result = running.client().Post("/v1/chat/completions", body.dump(), "application/json");
    refused.set_value(result ? std::pair{result->status, Json::parse(result->body, nullptr, false)}
                             : std::pair{-1, Json()});
  });
  // Whatever fails below, the compile is released and the thread joined before the server stops.
  struct Release {
    std::promise<void>& served;
    std::thread& thread;
    bool released = false;
    void release() {
      if (!released) served.set_value();
      released = true;
    }
    ~Release() {
      release();
      if (thread.joinable()) thread.join();
    }
  } release{other_served, pathological};
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  while (compiler.stats().compilations == 0 && Clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(compiler.stats().compilations, 1) << "the pathological request never started compiling";

  const auto served_normally = running.client().Post("/v1/chat/completions", chat_body(Json::object()).dump(), "application/json");
  ASSERT_TRUE(served_normally);
  EXPECT_EQ(served_normally->status, 200) << served_normally->body;
  EXPECT_EQ(compiler.stats().entries, 1) << "the other request was answered while the compile was in progress";
  release.release();

  auto future = refused.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  const auto [status, error] = future.get();
  compiler.set_compile_hook(nullptr);
  EXPECT_EQ(status, 400) << error.dump();
  EXPECT_EQ(error["error"]["param"], "structured_outputs.json") << error.dump();
  EXPECT_NE(error["error"]["message"].get<std::string>().find("longer than the limit of 20 ms"), std::string::npos)
      << error.dump();
  EXPECT_EQ(compiler.stats().timeouts, 1);

  // Still serving, constrained requests included.
  const auto constrained = running.client().Post(
      "/v1/chat/completions", chat_body({{"structured_outputs", {{"choice", {"yes", "no"}}}}}).dump(),
      "application/json");
  ASSERT_TRUE(constrained);
  EXPECT_EQ(constrained->status, 200) << constrained->body;
}

}  // namespace
}  // namespace deepinfer::server::testing

// Jump-forward through the server on the embedded model (assets/models/deepinfer-mini-v41, which
// was trained on the DeepSeek tokenizer's encoding): greedy answers under a JSON schema and under
// named tool choices are the same with and without it (content, tool calls, token counts, finish
// reasons); the tool calls' markup is forced, so they take fewer engine steps. (Under the default
// JSON whitespace a schema forces little: after a key's last token only its closing quote is
// forced, which the end rule leaves to the sampler since `":` may follow.) Streamed, a call made
// of forced markup comes out as the same call. Prints the steps and wall time of each
// (docs/BENCHMARKS.md, "Structured output: jump-forward").
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "sanitizer_scale.h"
#include "server_fixture.h"

namespace deepinfer::server {
namespace {

using Json = nlohmann::json;
using testing::RunningServer;

std::string embedded_model() { return (std::filesystem::path(DEEPINFER_ASSET_DIR) / "models" / "deepinfer-mini-v41").string(); }

ServerOptions embedded_options(bool jump_forward) {
  ServerOptions options = testing::test_options(embedded_model());
  options.tokenizer = "";  // the model folder's own (the bundled V4.1 tokenizer)
  options.served_model_name = "mini";
  options.engine.cache_memory_bytes = 128 << 20;
  options.engine.jump_forward = jump_forward;
  // Constrained requests never speculate; off spares both servers the start-up profile of step
  // costs that scheduled verification (the embedded model's default) takes, most of this test's
  // time under the sanitizers.
  options.speculative = engine::SpeculativeMode::off;
  return options;
}

const Json kPersonSchema = Json::parse(R"({
  "type": "object", "additionalProperties": false,
  "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"}},
  "required": ["name", "age", "city"]})");

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}},
  {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string", "description": "e.g. 12*7+3"}},
                   "required": ["expression"]}}}])");

Json jump_forward_requests() {
  const auto user = [](const std::string& text) { return Json::array({{{"role", "user"}, {"content", text}}}); };
  return Json::array({
      {{"messages", user("Give me a JSON object for a person named Alice, aged 30, living in Paris.")},
       {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "person"}, {"schema", kPersonSchema},
                                                                       {"strict", true}}}}}},
      {{"messages", user("Tell me the current weather in Lisbon.")},
       {"tools", kTools},
       {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}},
      {{"messages", user("Please calculate 8075-319 with the calculator tool.")},
       {"tools", kTools},
       {"tool_choice", {{"type", "function"}, {"function", {{"name", "calculator"}}}}}},
  });
}

struct Outcome {
  Json message;
  std::string finish;
  int64_t completion_tokens = 0;
  int64_t steps = 0;
  int64_t forced = 0;
  double seconds = 0;
};

// The engine's counters once it is idle (it publishes them after each step, so a read right after
// a response may miss the request's last step).
engine::EngineStats settled(RunningServer& server) {
  engine::EngineStats last = server.server().model().engine().stats();
  for (int i = 0; i < 500; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const engine::EngineStats now = server.server().model().engine().stats();
    if (now.running == 0 && now.waiting == 0 && now.steps == last.steps) return now;
    last = now;
  }
  return last;
}

Outcome ask(RunningServer& server, Json body) {
  body["model"] = "mini";
  body["temperature"] = 0;
  body["max_tokens"] = 120;
  body["thinking"] = {{"type", "disabled"}};
  httplib::Client client = server.client();
  const engine::EngineStats before = settled(server);
  const auto start = std::chrono::steady_clock::now();
  const auto response = client.Post("/v1/chat/completions", body.dump(), "application/json");
  Outcome out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(response && response->status == 200) << (response ? response->body : "no response");
  if (!response || response->status != 200) return out;
  const engine::EngineStats after = settled(server);
  const Json answer = Json::parse(response->body);
  out.message = answer.at("choices").at(0).at("message");
  if (out.message.contains("tool_calls"))  // each call's id is random
    for (Json& call : out.message.at("tool_calls")) call.erase("id");
  out.finish = answer.at("choices").at(0).at("finish_reason");
  out.completion_tokens = answer.at("usage").at("completion_tokens");
  out.steps = after.steps - before.steps;
  out.forced = after.forced_tokens - before.forced_tokens;
  return out;
}

TEST(JumpForwardServer, TheEmbeddedModelsAnswersAreTheSameInFewerSteps) {
  if (!std::filesystem::exists(embedded_model() + "/config.json")) GTEST_SKIP() << "the embedded model is absent";
  RunningServer with(embedded_options(true));
  RunningServer without(embedded_options(false));
  int64_t saved = 0;
  Outcome weather;
  // Each request twice: the first compiles its constraint and meets its grammar's states; the
  // second is timed warm. Under the sanitizers, one tool call once.
  const Json all = jump_forward_requests();
  const std::size_t first = deepinfer::testing::release_or_sanitized(0, 1);
  const std::size_t count = deepinfer::testing::release_or_sanitized(3, 1);
  const int repeats = deepinfer::testing::release_or_sanitized(2, 1);
  for (std::size_t r = first; r < first + count; ++r) {
    const Json& body = all[r];
    Outcome on, off;
    for (int repeat = 0; repeat < repeats; ++repeat) {
      on = ask(with, body);
      off = ask(without, body);
    }
    EXPECT_EQ(on.message, off.message) << body.dump();
    EXPECT_EQ(on.finish, off.finish);
    EXPECT_EQ(on.completion_tokens, off.completion_tokens);
    EXPECT_EQ(off.forced, 0);
    EXPECT_LE(on.steps, off.steps);
    if (body.contains("tool_choice")) {  // the invoke and parameter tags are forced
      EXPECT_GT(on.forced, 4) << body.dump();
      EXPECT_LT(on.steps, off.steps);
    }
    saved += off.steps - on.steps;
    if (r == 1) weather = on;
    std::printf("jump-forward: %s -> %s, %lld tokens (%lld forced): %lld steps %.3f s with, %lld steps %.3f s without\n",
                body.at("messages").at(0).at("content").get<std::string>().c_str(), on.finish.c_str(),
                static_cast<long long>(on.completion_tokens), static_cast<long long>(on.forced),
                static_cast<long long>(on.steps), on.seconds, static_cast<long long>(off.steps), off.seconds);
  }
  EXPECT_GT(saved, 0);
  // The tool call is the expected one (the model's training, kept under the constraint).
  ASSERT_EQ(weather.finish, "tool_calls") << weather.message.dump();
  const Json& call = weather.message.at("tool_calls").at(0).at("function");
  EXPECT_EQ(call.at("name"), "get_weather");
  EXPECT_EQ(Json::parse(call.at("arguments").get<std::string>()), Json({{"city", "Lisbon"}}));

  // Streamed, the forced markup comes in the same events as drawn text: the call's deltas join to
  // the same call.
  Json body = all[1];
  body.update({{"model", "mini"}, {"temperature", 0}, {"max_tokens", 120}, {"stream", true},
               {"thinking", {{"type", "disabled"}}}});
  const auto response = with.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(response && response->status == 200);
  std::string name, arguments;
  for (std::size_t at = 0; (at = response->body.find("data: {", at)) != std::string::npos;) {
    const std::size_t end = response->body.find("\n\n", at);
    const Json chunk = Json::parse(response->body.substr(at + 6, end - at - 6));
    at = end;
    if (chunk.at("choices").empty()) continue;
    const Json& delta = chunk.at("choices").at(0).at("delta");
    if (!delta.contains("tool_calls")) continue;
    const Json& function = delta.at("tool_calls").at(0).at("function");
    if (function.contains("name")) name += function.at("name").get<std::string>();
    if (function.contains("arguments")) arguments += function.at("arguments").get<std::string>();
  }
  EXPECT_EQ(name, call.at("name").get<std::string>());
  EXPECT_EQ(arguments, call.at("arguments").get<std::string>());
}

}  // namespace
}  // namespace deepinfer::server

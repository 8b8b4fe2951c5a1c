// Every non-2xx answer of the Anthropic endpoints (/v1/messages, /v1/messages/count_tokens) is
// Anthropic's error object, {"type": "error", "error": {"type", "message"}}, its type chosen by
// the status; every other endpoint keeps OpenAI's {"error": {"message", "type", "param", "code"}}.
// Also Anthropic's tool_choice modes, which follow Chat Completions' (issue 17).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "api/chunk_anthropic_messages.h"
#include "server/http_io.h"
#include "held_requests.h"
#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

using Json = nlohmann::json;

// Checks the body is exactly Anthropic's error object with `type`, and returns its message.
std::string anthropic_error_message(const httplib::Result& result, int status, const std::string& type) {
  EXPECT_TRUE(result);
  if (!result) return {};
  EXPECT_EQ(result->status, status) << result->body;
  EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
  const Json body = Json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(body.is_object()) << result->body;
  if (!body.is_object()) return {};
  EXPECT_EQ(body.size(), 2u) << result->body;
  EXPECT_EQ(body.value("type", ""), "error") << result->body;
  const Json error = body.value("error", Json::object());
  EXPECT_EQ(error.size(), 2u) << result->body;  // type and message: no OpenAI param / code
  EXPECT_EQ(error.value("type", ""), type) << result->body;
  EXPECT_TRUE(error.contains("message") && error["message"].is_string()) << result->body;
  return error.value("message", "");
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Json messages_body(const std::string& content = "Hello there") {
  return {{"model", "tiny"},
          {"max_tokens", 2},
          {"thinking", {{"type", "disabled"}}},
          {"messages", {{{"role", "user"}, {"content", content}}}}};
}

const Json kWeatherTool = {{"name", "get_weather"},
                           {"description", "Current weather in a city"},
                           {"input_schema",
                            {{"type", "object"},
                             {"properties", {{"city", {{"type", "string"}}}}},
                             {"required", {"city"}}}}};

TEST(AnthropicErrorShape, TheAnthropicPathsAndOnlyThemGetAnthropicsShape) {
  for (const char* path : {"/v1/messages", "/messages", "/v1/messages/count_tokens", "/messages/count_tokens",
                           "/v1/messages/batches", "/messages/anything/else"})
    EXPECT_EQ(error_shape(path), ErrorShape::Anthropic) << path;
  for (const char* path : {"/v1/chat/completions", "/chat/completions", "/v1/completions", "/v1/responses",
                           "/v1/models", "/tokenize", "/health", "/v1/messagesx", "/v1/message", "/", ""})
    EXPECT_EQ(error_shape(path), ErrorShape::OpenAI) << path;
}

TEST(AnthropicErrorShape, TheTypeFollowsTheStatus) {
  const std::vector<std::pair<int, std::string>> expected = {
      {400, "invalid_request_error"}, {401, "authentication_error"}, {402, "billing_error"},
      {403, "permission_error"},      {404, "not_found_error"},      {405, "invalid_request_error"},
      {413, "request_too_large"},     {422, "invalid_request_error"}, {429, "rate_limit_error"},
      {499, "invalid_request_error"}, {500, "api_error"},            {502, "api_error"},
      {503, "overloaded_error"},      {504, "timeout_error"},        {529, "overloaded_error"}};
  for (const auto& [status, type] : expected) {
    // The OpenAI type the error carries does not matter: Anthropic's comes from the status.
    const api::ApiError error(status, "what went wrong", "param", "server_error", "some_code");
    EXPECT_EQ(api::anthropic_error_type(status), type) << status;
    const Json body = Json::parse(error_body(error, ErrorShape::Anthropic));
    EXPECT_EQ(body, (Json{{"type", "error"}, {"error", {{"type", type}, {"message", "what went wrong"}}}}))
        << status;
    // The mid-stream error event carries the same object.
    EXPECT_EQ(Json::parse(api::wire_text(api::messages_error(error))), body) << status;
    // OpenAI's shape is unchanged.
    EXPECT_EQ(Json::parse(error_body(error)),
              (Json{{"error",
                     {{"message", "what went wrong"}, {"type", "server_error"}, {"param", "param"},
                      {"code", "some_code"}}}}))
        << status;
  }
}

class AnthropicErrorsTest : public SharedServerTest {
 protected:
  static httplib::Result post(const std::string& path, const std::string& body) {
    return server().client().Post(path.c_str(), body, "application/json");
  }
  static httplib::Result post(const std::string& path, const Json& body) { return post(path, body.dump()); }
};

TEST_F(AnthropicErrorsTest, BadRequestsAre400InvalidRequestError) {
  for (const char* path : {"/v1/messages", "/messages", "/v1/messages/count_tokens", "/messages/count_tokens"}) {
    SCOPED_TRACE(path);
    EXPECT_TRUE(contains(anthropic_error_message(post(path, std::string("{\"model\": ")), 400,
                                                 "invalid_request_error"),
                         "could not parse the JSON body"));
    EXPECT_TRUE(contains(
        anthropic_error_message(post(path, std::string("[1, 2]")), 400, "invalid_request_error"),
        "must be a JSON object"));
    Json no_messages = messages_body();
    no_messages.erase("messages");
    EXPECT_TRUE(contains(anthropic_error_message(post(path, no_messages), 400, "invalid_request_error"),
                         "messages: field required"));
    Json bad_role = messages_body();
    bad_role["messages"][0]["role"] = "tool";
    EXPECT_TRUE(contains(anthropic_error_message(post(path, bad_role), 400, "invalid_request_error"),
                         "expected 'user' or 'assistant'"));
  }
  Json no_max_tokens = messages_body();
  no_max_tokens.erase("max_tokens");
  EXPECT_TRUE(contains(anthropic_error_message(post("/v1/messages", no_max_tokens), 400, "invalid_request_error"),
                       "max_tokens: field required"));
  Json too_long = messages_body();
  too_long["max_tokens"] = int64_t{1} << 40;
  EXPECT_TRUE(contains(anthropic_error_message(post("/v1/messages", too_long), 400, "invalid_request_error"),
                       "maximum context length"));
  Json streamed = too_long;
  streamed["stream"] = true;  // refused before the stream starts: a status and a body, not an event
  EXPECT_TRUE(contains(anthropic_error_message(post("/v1/messages", streamed), 400, "invalid_request_error"),
                       "maximum context length"));
}

TEST_F(AnthropicErrorsTest, UnknownModelIs404NotFoundErrorWithTheServersMessage) {
  Json body = messages_body();
  body["model"] = "claude-sonnet-4-5";
  for (const char* path : {"/v1/messages", "/v1/messages/count_tokens"}) {
    EXPECT_EQ(anthropic_error_message(post(path, body), 404, "not_found_error"),
              "The model `claude-sonnet-4-5` does not exist.")
        << path;
  }
  body["stream"] = true;
  EXPECT_EQ(anthropic_error_message(post("/v1/messages", body), 404, "not_found_error"),
            "The model `claude-sonnet-4-5` does not exist.");
}

// An unknown path is 404 not_found_error; a method the path does not serve is 405 (issue 19;
// cpp-httplib answered 404), with Allow, in Anthropic's shape under /v1/messages.
TEST_F(AnthropicErrorsTest, UnknownPathsUnderMessagesAre404AndWrongMethods405) {
  EXPECT_EQ(anthropic_error_message(post("/v1/messages/batches", messages_body()), 404, "not_found_error"),
            "Not found: POST /v1/messages/batches");
  auto get = server().client().Get("/v1/messages");
  EXPECT_EQ(anthropic_error_message(get, 405, "invalid_request_error"), "Method GET is not allowed on /v1/messages");
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  EXPECT_EQ(anthropic_error_message(server().client().Get("/v1/messages/count_tokens"), 405, "invalid_request_error"),
            "Method GET is not allowed on /v1/messages/count_tokens");
  EXPECT_EQ(anthropic_error_message(server().client().Delete("/v1/messages"), 405, "invalid_request_error"),
            "Method DELETE is not allowed on /v1/messages");
}

TEST_F(AnthropicErrorsTest, OpenAIEndpointsKeepOpenAIsShape) {
  Json chat = {{"model", "gpt-4"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  auto result = post("/v1/chat/completions", chat);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 404);
  const Json body = Json::parse(result->body);
  EXPECT_FALSE(body.contains("type"));
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["code"], "model_not_found");
  EXPECT_EQ(body["error"]["param"], "model");
  auto unknown = server().client().Get("/v1/messagesx");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_TRUE(Json::parse(unknown->body)["error"].contains("code"));
  auto malformed = post("/v1/responses", std::string("{"));
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);
  EXPECT_EQ(Json::parse(malformed->body)["error"]["code"], "invalid_json");
}

// tool_choice as Chat Completions treats it: "any" is "required" and "tool" a named function,
// both refused in thinking mode with Chat Completions' message; "none" and "auto" run.
TEST_F(AnthropicErrorsTest, ToolChoiceFollowsChatCompletions) {
  Json body = messages_body("Weather in Oslo?");
  body["tools"] = Json::array({kWeatherTool});
  body["thinking"] = {{"type", "enabled"}};
  for (const Json& choice : {Json{{"type", "any"}}, Json{{"type", "tool"}, {"name", "get_weather"}}}) {
    body["tool_choice"] = choice;
    EXPECT_EQ(anthropic_error_message(post("/v1/messages", body), 400, "invalid_request_error"),
              "Thinking mode does not support this tool_choice")
        << choice;
  }
  body["tool_choice"] = {{"type", "tool"}, {"name", "get_time"}};
  EXPECT_EQ(anthropic_error_message(post("/v1/messages", body), 400, "invalid_request_error"),
            "tool_choice: no tool named 'get_time' was specified");
  body["tool_choice"] = {{"type", "sometimes"}};
  EXPECT_TRUE(contains(anthropic_error_message(post("/v1/messages", body), 400, "invalid_request_error"),
                       "tool_choice.type"));

  // Thinking off: "any" and a named tool prefill the tool-call block, so the prompt is longer
  // than auto's by the same few tokens; "none" leaves the tools out of the prompt.
  body["thinking"] = {{"type", "disabled"}};
  auto input_tokens = [&](const Json& choice) -> int64_t {
    body["tool_choice"] = choice;
    auto result = post("/v1/messages", body);
    if (!result || result->status != 200) {
      ADD_FAILURE() << choice << ": " << (result ? result->body : "no answer");
      return -1;
    }
    const Json answer = Json::parse(result->body);
    return answer["usage"]["input_tokens"].get<int64_t>() + answer["usage"]["cache_read_input_tokens"].get<int64_t>();
  };
  const int64_t automatic = input_tokens({{"type", "auto"}});
  const int64_t any = input_tokens({{"type", "any"}});
  const int64_t named = input_tokens({{"type", "tool"}, {"name", "get_weather"}});
  const int64_t none = input_tokens({{"type", "none"}});
  EXPECT_GT(any, automatic);
  EXPECT_EQ(any, named);
  EXPECT_LT(none, automatic);
  // The same prompt as Chat Completions' "required".
  Json chat = {{"model", "tiny"},
               {"max_tokens", 2},
               {"thinking", {{"type", "disabled"}}},
               {"messages", {{{"role", "user"}, {"content", "Weather in Oslo?"}}}},
               {"tools",
                {{{"type", "function"},
                  {"function",
                   {{"name", "get_weather"},
                    {"description", "Current weather in a city"},
                    {"parameters", kWeatherTool["input_schema"]}}}}}},
               {"tool_choice", "required"}};
  auto required = post("/v1/chat/completions", chat);
  ASSERT_TRUE(required);
  ASSERT_EQ(required->status, 200) << required->body;
  EXPECT_EQ(Json::parse(required->body)["usage"]["prompt_tokens"].get<int64_t>(), any);
}

TEST(AnthropicErrorLimits, MissingApiKeyIs401AuthenticationError) {
  ServerOptions options = test_options();
  options.api_key = "secret";
  RunningServer server(options);
  auto client = server.client();
  for (const char* path : {"/v1/messages", "/v1/messages/count_tokens", "/messages"}) {
    EXPECT_EQ(anthropic_error_message(client.Post(path, messages_body().dump(), "application/json"), 401,
                                      "authentication_error"),
              "Incorrect API key provided.")
        << path;
    EXPECT_EQ(anthropic_error_message(client.Post(path, {{"x-api-key", "wrong"}}, messages_body().dump(),
                                                  "application/json"),
                                      401, "authentication_error"),
              "Incorrect API key provided.")
        << path;
  }
  auto counted = client.Post("/v1/messages/count_tokens", {{"x-api-key", "secret"}}, messages_body().dump(),
                             "application/json");
  ASSERT_TRUE(counted);
  EXPECT_EQ(counted->status, 200);
  auto models = client.Get("/v1/models");  // OpenAI's endpoint keeps OpenAI's shape
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["error"]["code"], "invalid_api_key");
}

TEST(AnthropicErrorLimits, OversizedBodyIs413RequestTooLarge) {
  ServerOptions options = test_options();
  options.max_body_bytes = 1024;
  RunningServer server(options);
  const std::string body = messages_body(std::string(4096, 'a')).dump();
  for (const char* path : {"/v1/messages", "/v1/messages/count_tokens"})
    EXPECT_EQ(anthropic_error_message(server.client().Post(path, body, "application/json"), 413,
                                      "request_too_large"),
              "The request body is larger than the server's limit")
        << path;
  auto chat = server.client().Post("/v1/chat/completions", body, "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 413);
  EXPECT_TRUE(Json::parse(chat->body)["error"].contains("code"));
}

// A full queue is 429 rate_limit_error; then, shutting down with requests still running, a new
// Messages request is 503 overloaded_error.
TEST(AnthropicErrorLimits, FullQueueIs429RateLimitErrorAndShuttingDownIs503OverloadedError) {
  RunningServer server(options_for_one_running_one_waiting());
  std::atomic<bool> release{false};
  Json endless = messages_body();
  endless["max_tokens"] = server.server().model().context_length() - 64;  // runs until released
  endless["ignore_eos"] = true;
  endless["stream"] = true;
  auto hold = [&, body = endless.dump()] { post_and_hold(server, "/v1/messages", body, release); };
  engine::Engine& engine = server.server().model().engine();
  std::thread running(hold);
  const bool first_runs = wait_for_requests(engine, 1, 0);
  std::thread waiting(hold);
  const bool full = first_runs && wait_for_requests(engine, 1, 1);
  std::thread shutting_down;
  if (full) {
    EXPECT_TRUE(contains(anthropic_error_message(server.client().Post("/v1/messages", messages_body().dump(),
                                                                       "application/json"),
                                                 429, "rate_limit_error"),
                         "The server is overloaded: the queue is full"));
    shutting_down = std::thread([&] { server.server().shutdown(); });
    const bool draining = wait_until([&] {
      auto health = server.client().Get("/health");
      return health && health->status == 503;
    });
    EXPECT_TRUE(draining);
    if (draining) {
      EXPECT_EQ(anthropic_error_message(server.client().Post("/v1/messages", messages_body().dump(),
                                                             "application/json"),
                                        503, "overloaded_error"),
                "The server is shutting down");
    }
  }
  release = true;
  running.join();
  waiting.join();
  if (shutting_down.joinable()) shutting_down.join();
  EXPECT_TRUE(full) << "the engine never held one running and one waiting request (first admitted: " << first_runs
                    << ")";
}

}  // namespace
}  // namespace deepinfer::server::testing

// Token counting without generating: POST /tokenize and /detokenize (vLLM's) and
// POST /v1/messages/count_tokens (Anthropic's). Counts must equal the prompt_tokens / input_tokens
// the generating endpoints report for the same request.
#include <gtest/gtest.h>

#include <string>

#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

using Json = nlohmann::json;

class TokenizeTest : public SharedServerTest {
 protected:
  static Json post_ok(const std::string& path, const Json& body) {
    auto result = server_->client().Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(result);
    if (!result) return Json();
    EXPECT_EQ(result->status, 200) << path << ": " << result->body;
    return Json::parse(result->body);
  }
  static Json post_error(const std::string& path, const Json& body, int status) {
    auto result = server_->client().Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(result);
    if (!result) return Json();
    EXPECT_EQ(result->status, status) << path << ": " << result->body;
    return Json::parse(result->body)["error"];
  }
};

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather of a city", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");

TEST_F(TokenizeTest, ChatMessagesCountAsTheChatEndpointsPromptTokens) {
  for (const bool thinking : {true, false}) {
    Json body = {{"model", "tiny"},
                 {"messages", {{{"role", "system"}, {"content", "Be brief."}},
                               {{"role", "user"}, {"content", "Weather in Paris?"}}}},
                 {"tools", kTools},
                 {"thinking", {{"type", thinking ? "enabled" : "disabled"}}}};
    const Json tokenized = post_ok("/tokenize", body);
    body["max_tokens"] = 1;
    const Json answered = post_ok("/v1/chat/completions", body);
    EXPECT_EQ(tokenized["count"], answered["usage"]["prompt_tokens"]) << "thinking " << thinking;
    EXPECT_EQ(tokenized["tokens"].size(), tokenized["count"].get<std::size_t>());
    EXPECT_EQ(tokenized["max_model_len"], server_->server().model().context_length());
    EXPECT_TRUE(tokenized["token_strs"].is_null());
  }
}

TEST_F(TokenizeTest, PromptTextCountsAsCompletionsAndRoundTripsThroughDetokenize) {
  const std::string text = "Once upon a time, 42 ünïcode words.";
  const Json with_bos = post_ok("/tokenize", {{"prompt", text}});
  const Json answered = post_ok("/v1/completions", {{"model", "tiny"}, {"prompt", text}, {"max_tokens", 1}});
  EXPECT_EQ(with_bos["count"], answered["usage"]["prompt_tokens"]);
  const Json plain = post_ok("/tokenize", {{"prompt", text}, {"add_special_tokens", false}, {"return_token_strs", true}});
  ASSERT_EQ(plain["count"].get<int>() + 1, with_bos["count"].get<int>());  // BOS
  EXPECT_EQ(Json(std::vector<Json>(with_bos["tokens"].begin() + 1, with_bos["tokens"].end())), plain["tokens"]);
  ASSERT_EQ(plain["token_strs"].size(), plain["tokens"].size());
  EXPECT_EQ(post_ok("/detokenize", {{"tokens", plain["tokens"]}})["prompt"], text);
  EXPECT_EQ(post_ok("/detokenize", {{"model", "tiny"}, {"tokens", Json::array()}})["prompt"], "");
}

TEST_F(TokenizeTest, MessagesCountTokensEqualsTheMessagesEndpointsInputTokens) {
  Json body = {{"model", "tiny"},
               {"system", "Be brief."},
               {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
               {"tools", Json::parse(R"([{"name": "get_weather", "description": "Weather of a city",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}])")}};
  const Json counted = post_ok("/v1/messages/count_tokens", body);  // no max_tokens: not needed here
  body["max_tokens"] = 1;
  const Json answered = post_ok("/v1/messages", body);
  // Anthropic's usage counts cache reads apart; count_tokens counts the whole prompt.
  const Json& usage = answered["usage"];
  EXPECT_EQ(counted, Json({{"input_tokens", usage["input_tokens"].get<int>() + usage["cache_read_input_tokens"].get<int>()}}));
  EXPECT_GT(counted["input_tokens"].get<int>(), 10);
}

TEST_F(TokenizeTest, BadRequestsAreRefusedWithTheErrorObject) {
  EXPECT_EQ(post_error("/tokenize", {{"model", "tiny"}}, 400)["param"], "prompt");
  post_error("/tokenize", {{"prompt", "a"}, {"messages", {{{"role", "user"}, {"content", "a"}}}}}, 400);
  post_error("/tokenize", {{"prompt", 7}}, 400);
  EXPECT_EQ(post_error("/tokenize", {{"model", "other"}, {"prompt", "a"}}, 404)["code"], "model_not_found");
  post_error("/tokenize", {{"messages", "not a list"}}, 400);
  EXPECT_EQ(post_error("/detokenize", {{"tokens", {1, -1}}}, 400)["param"], "tokens");
  EXPECT_EQ(post_error("/detokenize", {{"tokens", {1 << 30}}}, 400)["param"], "tokens");
  post_error("/detokenize", {{"tokens", {"a"}}}, 400);
  post_error("/detokenize", Json::object(), 400);
  post_error("/v1/messages/count_tokens", {{"model", "tiny"}}, 400);
  // count_tokens is an Anthropic endpoint: Anthropic's error type (anthropic_errors_test.cpp).
  EXPECT_EQ(post_error("/v1/messages/count_tokens",
                       {{"model", "other"}, {"messages", {{{"role", "user"}, {"content", "a"}}}}}, 404)["type"],
            "not_found_error");
  auto malformed = server_->client().Post("/tokenize", "{", "application/json");
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);
}

TEST(TokenizeLimits, TheApiKeyGuardsTheTokenEndpointsToo) {
  ServerOptions options = test_options();
  options.api_key = "secret";
  RunningServer server(options);
  auto client = server.client();
  const std::string body = Json{{"prompt", "hi"}}.dump();
  EXPECT_EQ(client.Post("/tokenize", body, "application/json")->status, 401);
  EXPECT_EQ(client.Post("/tokenize", {{"Authorization", "Bearer secret"}}, body, "application/json")->status, 200);
  EXPECT_EQ(client.Post("/detokenize", Json{{"tokens", {1}}}.dump(), "application/json")->status, 401);
  EXPECT_EQ(client.Post("/v1/messages/count_tokens", "{}", "application/json")->status, 401);
}

}  // namespace
}  // namespace deepinfer::server::testing

// POST /v1/responses end to end: the body and the typed event stream of one greedy request agree,
// the stream's events are the SDK's shape, a bad body is OpenAI's 400 error object, the key
// applies without the /v1 prefix too, and a client that leaves mid-stream frees its request.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

using Json = nlohmann::json;

// (event name, data JSON) of each SSE frame.
std::vector<std::pair<std::string, Json>> sse_events(const std::string& body) {
  std::vector<std::pair<std::string, Json>> out;
  std::size_t at = 0;
  while ((at = body.find("event: ", at)) != std::string::npos) {
    const std::size_t name_end = body.find('\n', at);
    const std::size_t data_start = name_end + 1;
    EXPECT_EQ(body.compare(data_start, 6, "data: "), 0) << body.substr(at, 80);
    const std::size_t data_end = body.find("\n\n", data_start);
    out.emplace_back(body.substr(at + 7, name_end - at - 7),
                     Json::parse(body.substr(data_start + 6, data_end - data_start - 6)));
    at = data_end;
  }
  return out;
}

// Text of every item of one kind in a response's output, joined.
std::string item_text(const Json& response, const std::string& type) {
  std::string text;
  for (const Json& item : response["output"])
    if (item["type"] == type)
      for (const Json& part : item["content"]) text += part["text"].get<std::string>();
  return text;
}

class ResponsesServerTest : public SharedServerTest {
 public:
  static httplib::Result post(const Json& body, const std::string& path = "/v1/responses") {
    return server_->client().Post(path.c_str(), body.dump(), "application/json");
  }
  static Json request(int max_output_tokens, bool stream) {
    return {{"model", "tiny"}, {"input", "Hello there"}, {"temperature", 0},
            {"max_output_tokens", max_output_tokens}, {"stream", stream}};
  }
};

// Posts `whole` and its streaming twin; checks the stream's framing and that both give the same
// answer; returns the body.
Json expect_stream_matches_body(Json whole_request) {
  auto whole = ResponsesServerTest::post(whole_request);
  whole_request["stream"] = true;
  auto streamed = ResponsesServerTest::post(whole_request);
  if (!whole || !streamed) {
    ADD_FAILURE() << "no response";
    return {};
  }
  EXPECT_EQ(whole->status, 200) << whole->body;
  EXPECT_EQ(streamed->status, 200) << streamed->body;
  EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(streamed->body.find("[DONE]"), std::string::npos);
  const Json body = Json::parse(whole->body);
  EXPECT_EQ(body["object"], "response");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["id"].get<std::string>().rfind("resp_", 0), 0u);

  const auto events = sse_events(streamed->body);
  if (events.size() < 3) {
    ADD_FAILURE() << streamed->body;
    return body;
  }
  EXPECT_EQ(events[0].first, "response.created");
  EXPECT_EQ(events[1].first, "response.in_progress");
  std::string streamed_text;
  std::string streamed_reasoning;
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].second["type"], events[i].first);
    EXPECT_EQ(events[i].second["sequence_number"], i);
    if (events[i].first == "response.output_text.delta") streamed_text += events[i].second["delta"].get<std::string>();
    if (events[i].first == "response.reasoning_text.delta")
      streamed_reasoning += events[i].second["delta"].get<std::string>();
  }
  const Json& last = events.back().second["response"];
  EXPECT_EQ(events.back().first, body["status"] == "incomplete" ? "response.incomplete" : "response.completed");
  EXPECT_EQ(last["status"], body["status"]);
  EXPECT_EQ(last["id"], events[0].second["response"]["id"]);
  EXPECT_EQ(streamed_text, item_text(body, "message"));
  EXPECT_EQ(streamed_reasoning, item_text(body, "reasoning"));
  EXPECT_EQ(item_text(last, "message"), item_text(body, "message"));
  EXPECT_EQ(item_text(last, "reasoning"), item_text(body, "reasoning"));
  EXPECT_EQ(last["output"].size(), body["output"].size());
  for (const char* key : {"input_tokens", "output_tokens", "total_tokens", "output_tokens_details"})
    EXPECT_EQ(last["usage"][key], body["usage"][key]) << key;
  return body;
}

TEST_F(ResponsesServerTest, StreamAndBodyGiveTheSameAnswer) {
  // Thinking is on by default: the random model's first tokens are reasoning.
  const Json thinking = expect_stream_matches_body(request(6, false));
  ASSERT_FALSE(thinking["output"].empty());
  EXPECT_EQ(thinking["output"][0]["type"], "reasoning");
  EXPECT_FALSE(item_text(thinking, "reasoning").empty());
  EXPECT_GT(thinking["usage"]["output_tokens_details"]["reasoning_tokens"].get<int>(), 0);

  Json no_thinking = request(6, false);
  no_thinking["reasoning"] = {{"effort", "none"}};
  const Json answer = expect_stream_matches_body(no_thinking);
  EXPECT_FALSE(item_text(answer, "message").empty());
  EXPECT_EQ(answer["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_LE(answer["usage"]["output_tokens"].get<int>(), 6);
}

TEST_F(ResponsesServerTest, BadBodiesAre400WithOpenAIsErrorObject) {
  auto malformed = server_->client().Post("/v1/responses", "{\"model\": ", "application/json");
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);
  Json zero = request(0, true);
  auto refused = post(zero);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  const Json error = Json::parse(refused->body).at("error");
  EXPECT_EQ(error["type"], "invalid_request_error");
  EXPECT_EQ(error["param"], "max_output_tokens");
  EXPECT_TRUE(error.contains("code"));
  EXPECT_TRUE(error["message"].is_string());
  auto unprefixed = post(request(2, false), "/responses");
  ASSERT_TRUE(unprefixed);
  EXPECT_EQ(unprefixed->status, 200) << unprefixed->body;
}

TEST_F(ResponsesServerTest, ClientThatDisconnectsMidStreamFreesItsRequest) {
  engine::Engine& engine = server_->server().model().engine();
  const int64_t context = server_->server().model().context_length();
  ASSERT_GT(context, 1000);
  const std::string body = request(static_cast<int>(context - 100), true).dump();
  EXPECT_EQ(read_three_chunks_and_hang_up(server(), "/v1/responses", body), 3);
  const engine::EngineStats stats = stats_after_cancellation(engine);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.in_use_blocks, 0);
}

TEST(ResponsesServerLimits, ApiKeyIsRequiredWithAndWithoutV1) {
  ServerOptions options = test_options();
  options.api_key = "secret";
  RunningServer server(options);
  auto client = server.client();
  const std::string body = Json{{"model", "tiny"}, {"input", "Hi"}, {"max_output_tokens", 1}}.dump();
  for (const char* path : {"/v1/responses", "/responses"}) {
    auto missing = client.Post(path, body, "application/json");
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 401) << path;
    EXPECT_EQ(Json::parse(missing->body)["error"]["code"], "invalid_api_key");
  }
  EXPECT_EQ(client.Post("/v1/responses", {{"Authorization", "Bearer secret"}}, body, "application/json")->status, 200);
}

}  // namespace
}  // namespace deepinfer::server::testing

// The HTTP server end to end, in process, on a free port: protocol shape, errors, limits,
// cancellation. Random weights: the text is gibberish, the tests check the protocol.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <vector>

#include "held_requests.h"
#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

using Json = nlohmann::json;

class ServerTest : public SharedServerTest {
 protected:
  static httplib::Result post(const std::string& path, const Json& body) {
    return server().client().Post(path.c_str(), body.dump(), "application/json");
  }
  static Json chat_body(int max_tokens, bool stream = false) {
    Json body = {{"model", "tiny"},
                 {"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
                 {"thinking", {{"type", "disabled"}}},
                 {"temperature", 0},
                 {"max_tokens", max_tokens}};
    if (stream) body["stream"] = true;
    return body;
  }
  static Json error_of(const httplib::Result& result) { return Json::parse(result->body).at("error"); }
};

TEST_F(ServerTest, ChatCompletionNonStreaming) {
  auto result = post("/v1/chat/completions", chat_body(6));
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  Json body = Json::parse(result->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  const std::string finish = body["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
  const Json& usage = body["usage"];
  // <BOS><User>Hello there<Assistant></think>: 4 marker ids plus the text's.
  EXPECT_GT(usage["prompt_tokens"].get<int>(), 4);
  EXPECT_LE(usage["completion_tokens"].get<int>(), 6);
  EXPECT_EQ(usage["prompt_cache_hit_tokens"].get<int>() + usage["prompt_cache_miss_tokens"].get<int>(),
            usage["prompt_tokens"].get<int>());
  EXPECT_EQ(usage["total_tokens"], usage["prompt_tokens"].get<int>() + usage["completion_tokens"].get<int>());
}

TEST_F(ServerTest, ChatCompletionAlsoAnswersWithoutTheV1Prefix) {
  auto result = post("/chat/completions", chat_body(2));
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200) << result->body;
}

TEST_F(ServerTest, ChatCompletionStreamsChunksUsageAndDone) {
  Json body = chat_body(5, true);
  body["stream_options"] = {{"include_usage", true}};
  auto result = post("/v1/chat/completions", body);
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  EXPECT_EQ(result->get_header_value("Content-Type"), "text/event-stream");
  auto lines = sse_data_lines(result->body);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines.back(), "[DONE]");
  Json first = Json::parse(lines.front());
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  for (std::size_t i = 0; i + 2 < lines.size(); ++i) {
    Json chunk = Json::parse(lines[i]);
    EXPECT_TRUE(chunk.contains("usage") && chunk["usage"].is_null()) << lines[i];
    EXPECT_EQ(chunk["id"], first["id"]);
  }
  Json last = Json::parse(lines[lines.size() - 2]);
  EXPECT_FALSE(last["choices"][0]["finish_reason"].is_null());
  EXPECT_GT(last["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_TRUE(last["usage"].contains("prompt_cache_hit_tokens"));
  EXPECT_TRUE(last["usage"]["completion_tokens_details"].contains("reasoning_tokens"));
}

TEST_F(ServerTest, ChatStreamWithoutIncludeUsageLeavesTheKeyOutUntilTheEnd) {
  auto result = post("/v1/chat/completions", chat_body(3, true));
  ASSERT_TRUE(result);
  auto lines = sse_data_lines(result->body);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_FALSE(Json::parse(lines.front()).contains("usage"));
}

TEST_F(ServerTest, CompletionsWithTokenIdsAndLogprobs) {
  Json body = {{"model", "tiny"}, {"prompt", {0, 300, 4000, 17}}, {"max_tokens", 4},
               {"logprobs", 2},   {"temperature", 0}};
  auto result = post("/v1/completions", body);
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  Json out = Json::parse(result->body);
  EXPECT_EQ(out["object"], "text_completion");
  const Json& choice = out["choices"][0];
  const Json& logprobs = choice["logprobs"];
  const auto generated = out["usage"]["completion_tokens"].get<std::size_t>();
  EXPECT_EQ(out["usage"]["prompt_tokens"], 4);
  ASSERT_EQ(logprobs["tokens"].size(), generated);
  ASSERT_EQ(logprobs["token_logprobs"].size(), generated);
  ASSERT_EQ(logprobs["top_logprobs"].size(), generated);
  ASSERT_EQ(logprobs["text_offset"].size(), generated);
  for (std::size_t i = 0; i < generated; ++i) {
    EXPECT_LE(logprobs["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_LE(logprobs["top_logprobs"][i].size(), 2u);
    EXPECT_GE(logprobs["top_logprobs"][i].size(), 1u);
  }
}  // echo (the prompt's text and log-probabilities first): completions_echo_test.cpp

// The tokens a chat logprobs list names, by their raw bytes, for comparison with the legacy list.
std::vector<std::string> token_bytes_of(const Json& content) {
  std::vector<std::string> out;
  for (const Json& entry : content) {
    std::string bytes;
    for (const Json& byte : entry["bytes"]) bytes.push_back(static_cast<char>(byte.get<int>()));
    out.push_back(bytes);
  }
  return out;
}

TEST_F(ServerTest, ChatLogprobsListEveryAnswerTokenWithItsBestAlternatives) {
  Json body = chat_body(6);
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  auto result = post("/v1/chat/completions", body);
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  const Json out = Json::parse(result->body);
  const Json& choice = out["choices"][0];
  ASSERT_TRUE(choice["logprobs"].is_object()) << result->body;
  EXPECT_TRUE(choice["logprobs"]["refusal"].is_null());
  const Json& content = choice["logprobs"]["content"];
  ASSERT_EQ(content.size(), out["usage"]["completion_tokens"].get<std::size_t>());
  ASSERT_GT(content.size(), 0u);
  for (const Json& entry : content) {
    const double chosen = entry["logprob"].get<double>();
    EXPECT_LE(chosen, 0.0);
    const Json& top = entry["top_logprobs"];
    ASSERT_EQ(top.size(), 3u);
    for (std::size_t k = 0; k + 1 < top.size(); ++k)
      EXPECT_GE(top[k]["logprob"].get<double>(), top[k + 1]["logprob"].get<double>()) << "best first";
    // Greedy: the chosen token is the best one.
    EXPECT_NEAR(top[0]["logprob"].get<double>(), chosen, 1e-5);
    EXPECT_EQ(top[0]["bytes"], entry["bytes"]);
    for (const Json& alternative : top) EXPECT_TRUE(alternative.contains("token") && alternative["bytes"].is_array());
  }

  // The same prompt ids through /v1/completions give the same tokens with the same logprobs.
  const std::string rendered = "<｜begin▁of▁sentence｜><｜User｜>Hello there<｜Assistant｜></think>";
  Json legacy = {{"model", "tiny"}, {"prompt", rendered}, {"max_tokens", 6}, {"logprobs", 3}, {"temperature", 0}};
  auto legacy_result = post("/v1/completions", legacy);
  ASSERT_TRUE(legacy_result);
  ASSERT_EQ(legacy_result->status, 200) << legacy_result->body;
  const Json legacy_out = Json::parse(legacy_result->body);
  ASSERT_EQ(legacy_out["usage"]["prompt_tokens"], out["usage"]["prompt_tokens"]) << "same prompt ids";
  const Json& legacy_choice = legacy_out["choices"][0];
  EXPECT_EQ(legacy_choice["text"], choice["message"]["content"]);
  const Json& token_logprobs = legacy_choice["logprobs"]["token_logprobs"];
  const Json& legacy_tokens = legacy_choice["logprobs"]["tokens"];
  ASSERT_EQ(legacy_tokens.size(), content.size());
  ASSERT_EQ(token_logprobs.size(), content.size());
  const std::vector<std::string> bytes = token_bytes_of(content);
  for (std::size_t i = 0; i < content.size(); ++i) {
    EXPECT_EQ(content[i]["token"], legacy_tokens[i]) << i;
    // A token that splits a character has bytes that are not its (repaired) text.
    if (content[i]["token"].get<std::string>().find("\xEF\xBF\xBD") == std::string::npos)
      EXPECT_EQ(bytes[i], content[i]["token"].get<std::string>()) << i;
    else
      EXPECT_NE(bytes[i], content[i]["token"].get<std::string>()) << i;
    EXPECT_NEAR(token_logprobs[i].get<double>(), content[i]["logprob"].get<double>(), 1e-4) << i;
  }
}

TEST_F(ServerTest, ChatLogprobsStreamedEqualTheWholeAnswers) {
  Json body = chat_body(7);
  body["logprobs"] = true;
  body["top_logprobs"] = 2;
  auto whole = post("/v1/chat/completions", body);
  body["stream"] = true;
  auto streamed = post("/v1/chat/completions", body);
  ASSERT_TRUE(whole && streamed);
  ASSERT_EQ(whole->status, 200) << whole->body;
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  Json joined = Json::array();
  std::string text;
  for (const std::string& line : sse_data_lines(streamed->body)) {
    if (line == "[DONE]") break;
    const Json chunk = Json::parse(line);
    const Json& choice = chunk["choices"][0];
    const Json& delta = choice["delta"];
    const bool has_text = delta.contains("content") && delta["content"].is_string() && !delta["content"].get<std::string>().empty();
    if (has_text) {
      text += delta["content"].get<std::string>();
      ASSERT_TRUE(choice["logprobs"].is_object()) << line;
    }
    if (choice["logprobs"].is_object())
      for (const Json& entry : choice["logprobs"]["content"]) joined.push_back(entry);
  }
  const Json whole_out = Json::parse(whole->body);
  const Json& expected = whole_out["choices"][0];
  EXPECT_EQ(text, expected["message"]["content"].get<std::string>());
  EXPECT_EQ(joined, expected["logprobs"]["content"]);
}

TEST_F(ServerTest, ChatLogprobsWithoutTopLogprobsGiveEmptyAlternativesAndTheDefaultIsNull) {
  Json body = chat_body(3);
  auto plain = post("/v1/chat/completions", body);
  ASSERT_TRUE(plain);
  EXPECT_TRUE(Json::parse(plain->body)["choices"][0]["logprobs"].is_null());
  body["logprobs"] = true;
  auto result = post("/v1/chat/completions", body);
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  const Json out = Json::parse(result->body);
  const Json& content = out["choices"][0]["logprobs"]["content"];
  ASSERT_GT(content.size(), 0u) << result->body;
  for (const Json& entry : content) EXPECT_EQ(entry["top_logprobs"], Json::array());
}

TEST_F(ServerTest, ChatLogprobsLeaveReasoningTokensOut) {
  Json body = chat_body(8);
  body["thinking"] = {{"type", "enabled"}};
  body["logprobs"] = true;
  auto result = post("/v1/chat/completions", body);
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  const Json out = Json::parse(result->body);
  const Json& usage = out["usage"];
  const auto answer_tokens = usage["completion_tokens"].get<std::size_t>() -
                             usage["completion_tokens_details"]["reasoning_tokens"].get<std::size_t>();
  const Json& content = out["choices"][0]["logprobs"]["content"];
  // Random weights rarely close </think>: then every token is reasoning and the list is empty.
  EXPECT_LE(content.size(), answer_tokens);
  if (usage["completion_tokens_details"]["reasoning_tokens"] == usage["completion_tokens"]) {
    EXPECT_TRUE(content.empty());
  }
}

TEST_F(ServerTest, ChatTopLogprobsErrorsFollowOpenAI) {
  Json without = chat_body(2);
  without["top_logprobs"] = 2;
  auto missing = post("/v1/chat/completions", without);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 400);
  EXPECT_EQ(error_of(missing)["param"], "top_logprobs");
  EXPECT_NE(error_of(missing)["message"].get<std::string>().find("'logprobs' must be true"), std::string::npos);

  Json disabled = without;
  disabled["logprobs"] = false;
  EXPECT_EQ(post("/v1/chat/completions", disabled)->status, 400);

  Json above = chat_body(2);
  above["logprobs"] = true;
  above["top_logprobs"] = 21;
  auto too_many = post("/v1/chat/completions", above);
  ASSERT_TRUE(too_many);
  EXPECT_EQ(too_many->status, 400);
  EXPECT_EQ(error_of(too_many)["message"],
            "Invalid 'top_logprobs': integer above maximum value. Expected a value <= 20, but got 21 instead.");
  above["top_logprobs"] = -1;
  auto negative = post("/v1/chat/completions", above);
  EXPECT_EQ(negative->status, 400);
  EXPECT_EQ(error_of(negative)["message"],
            "Invalid 'top_logprobs': integer below minimum value. Expected a value >= 0, but got -1 instead.");
  above["top_logprobs"] = 20;
  EXPECT_EQ(post("/v1/chat/completions", above)->status, 200);
  Json not_bool = chat_body(2);
  not_bool["logprobs"] = 3;  // the legacy integer form is a Completions field, not a Chat one
  EXPECT_EQ(post("/v1/chat/completions", not_bool)->status, 400);
}

TEST_F(ServerTest, IgnoreEosGivesExactlyMaxTokensOnEveryEndpoint) {
  static constexpr int kTokens = 9;
  Json chat = chat_body(kTokens);
  chat["ignore_eos"] = true;
  Json completions = {{"model", "tiny"}, {"prompt", {0, 300, 4000}}, {"max_tokens", kTokens},
                      {"temperature", 0}, {"ignore_eos", true}};
  Json messages = {{"model", "tiny"}, {"max_tokens", kTokens}, {"ignore_eos", true},
                   {"thinking", {{"type", "disabled"}}},
                   {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  // Chat and Messages follow the recipe: ids still held for an incomplete UTF-8 character when
  // generation ends count for nothing, so the random model's last one to three byte tokens may not
  // be counted; Completions counts every id (and the forced-EOS request below pins it exactly).
  auto expect_max_tokens_used = [](const Json& count, const char* path) {
    EXPECT_LE(count.get<int>(), kTokens) << path;
    EXPECT_GE(count.get<int>(), kTokens - 3) << path;
  };
  for (const auto& [path, body] : {std::pair{"/v1/chat/completions", chat}, std::pair{"/v1/completions", completions}}) {
    auto result = post(path, body);
    ASSERT_TRUE(result);
    ASSERT_EQ(result->status, 200) << result->body;
    const Json out = Json::parse(result->body);
    if (body.contains("prompt"))
      EXPECT_EQ(out["usage"]["completion_tokens"], kTokens) << path;
    else
      expect_max_tokens_used(out["usage"]["completion_tokens"], path);
    EXPECT_EQ(out["choices"][0]["finish_reason"], "length") << path;
  }
  auto anthropic = post("/v1/messages", messages);
  ASSERT_TRUE(anthropic);
  ASSERT_EQ(anthropic->status, 200) << anthropic->body;
  const Json out = Json::parse(anthropic->body);
  expect_max_tokens_used(out["usage"]["output_tokens"], "/v1/messages");
  EXPECT_EQ(out["stop_reason"], "max_tokens");

  // EOS made certain by logit_bias: without ignore_eos the answer stops at once; with it, EOS
  // tokens count as generated and the answer runs to max_tokens.
  const int32_t eos = *server().server().model().tokenizer().eos_id();
  Json forced = completions;
  forced["logit_bias"] = {{std::to_string(eos), 100}};
  forced["logprobs"] = 1;
  auto forced_result = post("/v1/completions", forced);
  ASSERT_TRUE(forced_result);
  ASSERT_EQ(forced_result->status, 200) << forced_result->body;
  const Json forced_out = Json::parse(forced_result->body);
  EXPECT_EQ(forced_out["usage"]["completion_tokens"], kTokens);
  EXPECT_EQ(forced_out["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(forced_out["choices"][0]["logprobs"]["tokens"].size(), static_cast<std::size_t>(kTokens));
  forced.erase("ignore_eos");
  auto stopped = post("/v1/completions", forced);
  ASSERT_TRUE(stopped);
  EXPECT_EQ(Json::parse(stopped->body)["usage"]["completion_tokens"], 0);
  EXPECT_EQ(Json::parse(stopped->body)["choices"][0]["finish_reason"], "stop");

  Json not_bool = chat_body(2);
  not_bool["ignore_eos"] = "yes";
  EXPECT_EQ(post("/v1/chat/completions", not_bool)->status, 400);
}

TEST_F(ServerTest, CompletionsSeedRepeatsAndNGivesChoices) {
  Json body = {{"model", "tiny"}, {"prompt", "Once upon a time"}, {"max_tokens", 6},
               {"temperature", 1.0}, {"seed", 42}, {"n", 2}};
  auto a = post("/v1/completions", body);
  auto b = post("/v1/completions", body);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->status, 200) << a->body;
  Json ja = Json::parse(a->body), jb = Json::parse(b->body);
  ASSERT_EQ(ja["choices"].size(), 2u);
  EXPECT_EQ(ja["choices"][1]["index"], 1);
  EXPECT_EQ(ja["choices"], jb["choices"]);
}

TEST_F(ServerTest, CompletionsStreamWithUsage) {
  Json body = {{"model", "tiny"}, {"prompt", {0, 10, 20}}, {"max_tokens", 4}, {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  auto result = post("/v1/completions", body);
  ASSERT_TRUE(result);
  auto lines = sse_data_lines(result->body);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines.back(), "[DONE]");
  Json usage_chunk = Json::parse(lines[lines.size() - 2]);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens"], 3);
  bool finished = false;
  for (std::size_t i = 0; i + 2 < lines.size(); ++i)
    finished = finished || !Json::parse(lines[i])["choices"][0]["finish_reason"].is_null();
  EXPECT_TRUE(finished);
}

TEST_F(ServerTest, MessagesStreamEventsComeInOrder) {
  Json body = {{"model", "tiny"},
               {"max_tokens", 5},
               {"stream", true},
               {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  auto result = post("/v1/messages", body);
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  std::vector<std::string> events;
  std::size_t at = 0;
  while ((at = result->body.find("event: ", at)) != std::string::npos) {
    const std::size_t end = result->body.find('\n', at);
    events.push_back(result->body.substr(at + 7, end - at - 7));
    at = end;
  }
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.front(), "message_start");
  EXPECT_EQ(events[events.size() - 2], "message_delta");
  EXPECT_EQ(events.back(), "message_stop");
  int open_blocks = 0;
  for (const std::string& event : events) {
    if (event == "content_block_start") ++open_blocks;
    if (event == "content_block_stop") --open_blocks;
    EXPECT_GE(open_blocks, 0);
    EXPECT_LE(open_blocks, 1);
  }
  EXPECT_EQ(open_blocks, 0);
}

TEST_F(ServerTest, MessagesNonStreaming) {
  Json body = {{"model", "tiny"}, {"max_tokens", 3}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
               {"thinking", {{"type", "disabled"}}}};
  auto result = post("/v1/messages", body);
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  Json out = Json::parse(result->body);
  EXPECT_EQ(out["type"], "message");
  EXPECT_EQ(out["role"], "assistant");
  EXPECT_GT(out["usage"]["input_tokens"].get<int>() + out["usage"]["cache_read_input_tokens"].get<int>(), 0);
}

TEST_F(ServerTest, ModelsAndHealth) {
  auto models = server().client().Get("/v1/models");
  ASSERT_TRUE(models);
  Json out = Json::parse(models->body);
  ASSERT_EQ(out["data"].size(), 1u);
  EXPECT_EQ(out["data"][0]["id"], "tiny");
  EXPECT_GT(out["data"][0]["max_model_len"].get<int64_t>(), 0);
  auto health = server().client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(ServerTest, MetricsCountRequestsAndTokens) {
  auto count_of = [](const std::string& text, const std::string& series) -> double {
    const std::size_t at = text.find(series + " ");
    return at == std::string::npos ? 0.0 : std::stod(text.substr(at + series.size() + 1));
  };
  const std::string requests =
      "deepinfer:requests_total{model_name=\"tiny\",endpoint=\"/v1/chat/completions\",status=\"200\"}";
  const std::string bad =
      "deepinfer:requests_total{model_name=\"tiny\",endpoint=\"/v1/chat/completions\",status=\"400\"}";
  const std::string before = server().client().Get("/metrics")->body;
  ASSERT_EQ(post("/v1/chat/completions", chat_body(2))->status, 200);
  ASSERT_EQ(server().client().Post("/v1/chat/completions", "{", "application/json")->status, 400);
  const std::string after = server().client().Get("/metrics")->body;
  EXPECT_EQ(count_of(after, requests), count_of(before, requests) + 1);
  EXPECT_EQ(count_of(after, bad), count_of(before, bad) + 1);
  EXPECT_GT(count_of(after, "deepinfer:prompt_tokens_total{model_name=\"tiny\"}"),
            count_of(before, "deepinfer:prompt_tokens_total{model_name=\"tiny\"}"));
  EXPECT_GT(count_of(after, "deepinfer:e2e_request_latency_seconds_count"),
            count_of(before, "deepinfer:e2e_request_latency_seconds_count"));
  // The engine publishes its counters after the step that finished the request: poll for idle.
  const std::string in_use = "deepinfer:kv_cache_blocks_in_use{model_name=\"tiny\"}";
  std::string idle = after;
  for (int i = 0; i < 200 && count_of(idle, in_use) != 0.0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    idle = server().client().Get("/metrics")->body;
  }
  EXPECT_NE(idle.find(in_use + " 0\n"), std::string::npos) << idle;
  EXPECT_EQ(count_of(after, "deepinfer:kv_cache_blocks_total{model_name=\"tiny\"}"),
            static_cast<double>(server().server().model().total_blocks()));
  for (const char* name : {"deepinfer:time_to_first_token_seconds_bucket", "deepinfer:num_requests_running",
                           "deepinfer:num_requests_waiting", "deepinfer:kv_cache_usage_perc",
                           "deepinfer:prefix_cache_hits_total", "deepinfer:time_per_output_token_seconds_sum"})
    EXPECT_NE(after.find(name), std::string::npos) << name;
}

TEST_F(ServerTest, UnknownModelIs404) {
  Json body = chat_body(2);
  body["model"] = "gpt-4";
  auto result = post("/v1/chat/completions", body);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 404);
  EXPECT_EQ(error_of(result)["code"], "model_not_found");
}

TEST_F(ServerTest, MalformedRequestsAre400WithTheErrorObject) {
  auto malformed = server().client().Post("/v1/chat/completions", "{\"model\": ", "application/json");
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);
  EXPECT_EQ(error_of(malformed)["type"], "invalid_request_error");

  Json wrong_type = chat_body(2);
  wrong_type["messages"] = "hello";
  EXPECT_EQ(post("/v1/chat/completions", wrong_type)->status, 400);

  Json zero = chat_body(0);
  EXPECT_EQ(post("/v1/chat/completions", zero)->status, 400);

  Json huge = chat_body(2);
  huge["max_tokens"] = int64_t{1} << 40;
  auto too_long = post("/v1/chat/completions", huge);
  EXPECT_EQ(too_long->status, 400);
  EXPECT_EQ(error_of(too_long)["code"], "context_length_exceeded");

  Json bad_tool = chat_body(2);
  bad_tool["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "string"}}}}}}};
  EXPECT_EQ(post("/v1/chat/completions", bad_tool)->status, 400);

  EXPECT_EQ(server().client().Post("/v1/completions", "[1, 2]", "application/json")->status, 400);
  Json bad_prompt = {{"model", "tiny"}, {"prompt", {0, 999999999}}};
  EXPECT_EQ(post("/v1/completions", bad_prompt)->status, 400);

  auto unknown_path = server().client().Get("/v1/nothing");
  ASSERT_TRUE(unknown_path);
  EXPECT_EQ(unknown_path->status, 404);
  EXPECT_TRUE(Json::parse(unknown_path->body).contains("error"));
}

TEST_F(ServerTest, ConcurrentRequestsAllSucceed) {
  std::vector<std::future<int>> results;
  for (int i = 0; i < 8; ++i)
    results.push_back(std::async(std::launch::async, [i] {
      Json body = chat_body(3 + i % 3, i % 2 == 1);
      return post("/v1/chat/completions", body)->status;
    }));
  for (auto& result : results) EXPECT_EQ(result.get(), 200);
}

TEST_F(ServerTest, ClientThatDisconnectsMidStreamFreesItsCache) {
  engine::Engine& engine = server().server().model().engine();
  const int64_t context = server().server().model().context_length();
  ASSERT_GT(context, 1000);
  EXPECT_EQ(read_three_chunks_and_hang_up(server(), "/v1/chat/completions",
                                          chat_body(static_cast<int>(context - 100), true).dump()),
            3);
  const engine::EngineStats stats = stats_after_cancellation(engine);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.in_use_blocks, 0);
}

TEST(ServerLimits, ApiKeyIsRequiredOnV1) {
  ServerOptions options = test_options();
  options.api_key = "secret";
  RunningServer server(options);
  auto client = server.client();
  auto missing = client.Get("/v1/models");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 401);
  EXPECT_EQ(Json::parse(missing->body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(client.Get("/v1/models", {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(client.Get("/v1/models", {{"Authorization", "Bearer secret"}})->status, 200);
  EXPECT_EQ(client.Get("/v1/models", {{"x-api-key", "secret"}})->status, 200);
  EXPECT_EQ(client.Get("/health")->status, 200);
}

TEST(ServerLimits, OversizedBodyIs413) {
  ServerOptions options = test_options();
  options.max_body_bytes = 1024;
  RunningServer server(options);
  Json body = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", std::string(4096, 'a')}}}}};
  auto result = server.client().Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 413);
  EXPECT_TRUE(Json::parse(result->body).contains("error"));
}

TEST(ServerLimits, FullQueueIs429) {
  RunningServer server(options_for_one_running_one_waiting());
  std::atomic<bool> release{false};
  // No max_tokens: it would generate to the end of the context, so it runs until released.
  const std::string endless = Json{{"model", "tiny"}, {"prompt", {0, 5, 6}}, {"stream", true}}.dump();
  auto hold = [&] { post_and_hold(server, "/v1/completions", endless, release); };
  engine::Engine& engine = server.server().model().engine();
  // One request at a time: the server refuses when the (per-step) published waiting count has
  // reached max_waiting, so a second request sent before the first was admitted could itself be
  // refused.
  std::thread running(hold);
  const bool first_runs = wait_for_requests(engine, 1, 0);
  std::thread waiting(hold);
  const bool full = first_runs && wait_for_requests(engine, 1, 1);
  if (!full) {
    release = true;
    running.join();
    waiting.join();
    FAIL() << "the engine never held one running and one waiting request (first admitted: " << first_runs << ")";
  }
  auto refused = server.client().Post("/v1/completions",
                                      Json{{"model", "tiny"}, {"prompt", {0, 5}}, {"max_tokens", 2}}.dump(),
                                      "application/json");
  release = true;
  running.join();
  waiting.join();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429);
  EXPECT_EQ(Json::parse(refused->body)["error"]["type"], "rate_limit_error");
}

TEST(ServerVocabulary, PromptIdsBeyondTheModelsVocabularyAre400) {
  // The tiny V4.1 fixture has 512 ids; the V4.1 tokenizer's markers (~128800) are beyond them.
  RunningServer server(test_options(std::string(DEEPINFER_TEST_DATA_DIR) + "/golden/v41/tiny_fp8"));
  Json chat = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  auto refused = server.client().Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(Json::parse(refused->body)["error"]["message"].get<std::string>().find(
                "token outside the model's vocabulary"),
            std::string::npos);
  Json completion = {{"model", "tiny"}, {"prompt", {0, 5, 17, 99}}, {"max_tokens", 3}};
  auto ok = server.client().Post("/v1/completions", completion.dump(), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

}  // namespace
}  // namespace deepinfer::server::testing

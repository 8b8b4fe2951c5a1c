// POST /v1/completions with echo and logprobs: the prompt's tokens come first in the legacy
// logprobs lists (first one null), max_tokens 0 returns the prompt alone (lm-evaluation-harness's
// loglikelihood requests), and the prompt scores equal the scores of the same tokens generated.
#include <gtest/gtest.h>

#include <vector>

#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

using Json = nlohmann::json;

class CompletionsEchoTest : public SharedServerTest {
 protected:
  static Json completion(const Json& body) {
    auto result = server_->client().Post("/v1/completions", body.dump(), "application/json");
    if (!result) throw std::runtime_error("no answer");
    if (result->status != 200) throw std::runtime_error(result->body);
    return Json::parse(result->body);
  }
  static int status_of(const Json& body) {
    return server_->client().Post("/v1/completions", body.dump(), "application/json")->status;
  }
  static std::string decode(const std::vector<int32_t>& ids) { return server_->server().model().tokenizer().decode(ids); }
};

const std::vector<int32_t> kPrompt = {0, 300, 4000, 17, 9001, 42};

// Lengths match, the first entry is null, offsets start at 0 and grow by each token's text.
void expect_legacy_shape(const Json& logprobs, std::size_t entries, int top) {
  ASSERT_EQ(logprobs["tokens"].size(), entries);
  ASSERT_EQ(logprobs["token_logprobs"].size(), entries);
  ASSERT_EQ(logprobs["top_logprobs"].size(), entries);
  ASSERT_EQ(logprobs["text_offset"].size(), entries);
  EXPECT_TRUE(logprobs["token_logprobs"][0].is_null());
  EXPECT_TRUE(logprobs["top_logprobs"][0].is_null());
  EXPECT_EQ(logprobs["text_offset"][0], 0);
  for (std::size_t i = 1; i < entries; ++i) {
    EXPECT_LE(logprobs["token_logprobs"][i].get<double>(), 0.0) << i;
    EXPECT_EQ(logprobs["top_logprobs"][i].size(), static_cast<std::size_t>(top)) << i;
    EXPECT_GE(logprobs["text_offset"][i].get<int64_t>(), logprobs["text_offset"][i - 1].get<int64_t>()) << i;
  }
}

TEST_F(CompletionsEchoTest, EchoScoresThePromptThenTheGeneratedTokens) {
  const Json plain = completion({{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 3}, {"logprobs", 2}, {"temperature", 0}});
  const Json echoed = completion({{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 3}, {"logprobs", 2},
                                  {"temperature", 0}, {"echo", true}});
  const Json& logprobs = echoed["choices"][0]["logprobs"];
  const auto generated = echoed["usage"]["completion_tokens"].get<std::size_t>();
  EXPECT_EQ(generated, plain["usage"]["completion_tokens"].get<std::size_t>());
  expect_legacy_shape(logprobs, kPrompt.size() + generated, 2);
  // The prompt's entries spell the prompt; the generated part equals the answer without echo.
  std::string spelled;
  for (std::size_t i = 0; i < kPrompt.size(); ++i) {
    EXPECT_EQ(logprobs["text_offset"][i].get<std::size_t>(), spelled.size());
    spelled += logprobs["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(spelled, decode(kPrompt));
  EXPECT_EQ(echoed["choices"][0]["text"], decode(kPrompt) + plain["choices"][0]["text"].get<std::string>());
  for (const char* field : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (std::size_t i = 0; i < generated; ++i) {
      Json want = plain["choices"][0]["logprobs"][field][i];
      if (std::string(field) == "text_offset") want = want.get<int64_t>() + static_cast<int64_t>(decode(kPrompt).size());
      EXPECT_EQ(logprobs[field][kPrompt.size() + i], want) << field << " " << i;
    }
}

// Teacher forcing: the engine's greedy continuation, fed back as prompt, scores as it was sampled.
TEST_F(CompletionsEchoTest, MaxTokensZeroScoresThePromptAsGenerationDid) {
  engine::GenerationRequest request;
  request.prompt = kPrompt;
  request.sampling.temperature = 0;
  request.sampling.logprobs = 1;
  request.max_tokens = 4;
  request.ignore_eos = true;
  std::vector<engine::GeneratedToken> generated;
  auto stream = server_->server().model().engine().submit(request);
  while (!stream->done())
    if (auto event = stream->next(std::chrono::seconds(60)))
      generated.insert(generated.end(), event->tokens.begin(), event->tokens.end());
  ASSERT_EQ(generated.size(), 4u);
  std::vector<int32_t> forced = kPrompt;
  for (const engine::GeneratedToken& token : generated) forced.push_back(token.token);
  const Json scored = completion({{"model", "tiny"}, {"prompt", forced}, {"max_tokens", 0}, {"logprobs", 1},
                                  {"echo", true}, {"temperature", 0}});
  const Json& choice = scored["choices"][0];
  EXPECT_EQ(choice["text"], decode(forced));
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(scored["usage"]["completion_tokens"], 0);
  EXPECT_EQ(scored["usage"]["prompt_tokens"], forced.size());
  expect_legacy_shape(choice["logprobs"], forced.size(), 1);
  for (std::size_t i = 0; i < generated.size(); ++i) {
    EXPECT_EQ(choice["logprobs"]["token_logprobs"][kPrompt.size() + i].get<double>(),
              static_cast<double>(generated[i].logprob)) << i;
    EXPECT_EQ(choice["logprobs"]["top_logprobs"][kPrompt.size() + i].begin().value().get<double>(),
              static_cast<double>(generated[i].top_logprobs[0].logprob)) << i;
  }
}

TEST_F(CompletionsEchoTest, AStringPromptsInsertedBosTakesNoText) {
  const std::string text = "Hello there, world";
  const Json scored = completion({{"model", "tiny"}, {"prompt", text}, {"max_tokens", 0}, {"logprobs", 0}, {"echo", true}});
  const Json& logprobs = scored["choices"][0]["logprobs"];
  EXPECT_EQ(scored["choices"][0]["text"], text);
  const auto entries = scored["usage"]["prompt_tokens"].get<std::size_t>();
  expect_legacy_shape(logprobs, entries, 0);
  EXPECT_EQ(logprobs["text_offset"][1], 0);  // the BOS before it is not in the text
  std::string spelled;
  for (std::size_t i = 1; i < entries; ++i) {
    EXPECT_EQ(logprobs["text_offset"][i].get<std::size_t>(), spelled.size()) << i;
    spelled += logprobs["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(spelled, text);
}

TEST_F(CompletionsEchoTest, StreamedEntriesAndChoicesEqualTheWholeAnswer) {
  Json body = {{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 3}, {"logprobs", 1},
               {"temperature", 0}, {"echo", true}, {"n", 2}};
  const Json whole = completion(body);
  ASSERT_EQ(whole["choices"].size(), 2u);
  EXPECT_EQ(whole["choices"][0]["logprobs"], whole["choices"][1]["logprobs"]);  // greedy: the same
  body["stream"] = true;
  auto result = server_->client().Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200);
  std::vector<Json> tokens(2, Json::array()), values(2, Json::array());
  for (const std::string& line : sse_data_lines(result->body)) {
    if (line == "[DONE]") continue;
    const Json chunk = Json::parse(line);
    for (const Json& choice : chunk["choices"]) {
      if (choice["logprobs"].is_null()) continue;
      const int index = choice["index"];
      for (const Json& token : choice["logprobs"]["tokens"]) tokens[index].push_back(token);
      for (const Json& value : choice["logprobs"]["token_logprobs"]) values[index].push_back(value);
    }
  }
  for (int index = 0; index < 2; ++index) {
    EXPECT_EQ(tokens[index], whole["choices"][index]["logprobs"]["tokens"]) << index;
    EXPECT_EQ(values[index], whole["choices"][index]["logprobs"]["token_logprobs"]) << index;
  }
}

TEST_F(CompletionsEchoTest, MaxTokensZeroNeedsEcho) {
  EXPECT_EQ(status_of({{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 0}}), 400);
  EXPECT_EQ(status_of({{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", -1}, {"echo", true}}), 400);
  // echo without logprobs: the prompt text, no logprobs.
  const Json echoed = completion({{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 0}, {"echo", true}});
  EXPECT_EQ(echoed["choices"][0]["text"], decode(kPrompt));
  EXPECT_TRUE(echoed["choices"][0]["logprobs"].is_null());
}

// A missing field's error names it once, as the chat endpoint's does.
TEST_F(CompletionsEchoTest, AMissingModelOrPromptIsA400NamingTheField) {
  for (const auto& [body, message] : {std::pair{Json{{"prompt", kPrompt}}, "model: field required"},
                                      std::pair{Json{{"model", "tiny"}}, "prompt: field required"}}) {
    const auto result = server_->client().Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 400);
    EXPECT_EQ(Json::parse(result->body)["error"]["message"], message) << result->body;
  }
}

}  // namespace
}  // namespace deepinfer::server::testing

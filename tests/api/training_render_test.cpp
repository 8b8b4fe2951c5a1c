// render_training: the answer rendered as history after exactly the served prompt (the shared
// rendering of `deepinfer render --train` and `deepinfer perplexity`).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/training_render.h"
#include "api_test_support.h"
#include "core/error.h"

namespace deepinfer::api {
namespace {

using nlohmann::ordered_json;

const PromptEncoder& v41_encoder() {
  static const PromptEncoder encoder(testing::v41_tokenizer(), PromptFormat::V41);
  return encoder;
}

std::string error_of(const std::string& body) {
  try {
    render_training(v41_encoder(), PromptFormat::V41, ordered_json::parse(body), "f line 7");
  } catch (const Error& error) {
    return error.what();
  }
  return "(accepted)";
}

const char* kAsk = R"({"messages":[{"role":"user","content":"What is 2 + 3?"}]})";
const char* kAnswered =
    R"({"messages":[{"role":"user","content":"What is 2 + 3?"},)"
    R"({"role":"assistant","reasoning_content":"2 + 3 = 5.","content":"5"}]})";

TEST(TrainingRenderTest, ThePromptIsTheServedOneAndTheTargetIsTheAnswer) {
  const TrainingRender rendered = render_training(v41_encoder(), PromptFormat::V41, ordered_json::parse(kAnswered), "x");
  // The served prompt of the request without its answer (a body without "model" is accepted).
  ordered_json asked = ordered_json::parse(kAsk);
  asked["model"] = "m";
  const RenderedPrompt prompt = render_prompt(parse_chat_completions_request(asked).conversation, PromptFormat::V41);
  const std::vector<TokenId> prompt_ids = v41_encoder().encode(prompt);
  ASSERT_EQ(rendered.answer_start, prompt_ids.size());
  EXPECT_TRUE(std::equal(prompt_ids.begin(), prompt_ids.end(), rendered.ids.begin()));
  EXPECT_EQ(rendered.output_start, OutputStart::Thinking);
  EXPECT_EQ(rendered.text, prompt.text() + "2 + 3 = 5.</think>5<｜end▁of▁sentence｜>");
  const std::vector<TokenId> target(rendered.ids.begin() + static_cast<std::ptrdiff_t>(rendered.answer_start),
                                    rendered.ids.end());
  EXPECT_EQ(v41_encoder().tokenizer().decode(target), "2 + 3 = 5.</think>5<｜end▁of▁sentence｜>");
}

TEST(TrainingRenderTest, ThinkingOffDropsTheReasoning) {
  ordered_json body = ordered_json::parse(kAnswered);
  body["thinking"] = {{"type", "disabled"}};
  const TrainingRender rendered = render_training(v41_encoder(), PromptFormat::V41, body, "x");
  EXPECT_EQ(rendered.output_start, OutputStart::Answer);
  const std::vector<TokenId> target(rendered.ids.begin() + static_cast<std::ptrdiff_t>(rendered.answer_start),
                                    rendered.ids.end());
  EXPECT_EQ(v41_encoder().tokenizer().decode(target), "5<｜end▁of▁sentence｜>");
}

TEST(TrainingRenderTest, RefusalsNameTheLine) {
  EXPECT_EQ(error_of("[1]"), "f line 7: expected a JSON object (a Chat Completions request body)");
  EXPECT_EQ(error_of(kAsk), "f line 7: the last message must be the assistant answer");
  // Wrongly typed fields are refusals, not escaping JSON type errors (found by fuzz_training_render).
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"hi"},{"role":["assistant"],"content":"x"}]})"),
            "f line 7: the last message must be the assistant answer");
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"",)"
                     R"("tool_calls":[7,{"id":[1],"type":"function","function":{"name":"f","arguments":"{}"}}]}]})")
                .rfind("f line 7: ", 0),
            0u);
  EXPECT_EQ(error_of(R"({"messages":[{"role":"assistant","content":"x"}]})").rfind("f line 7: ", 0), 0u);
  // A request the server refuses (thinking mode with a required tool_choice): its message, line named.
  const std::string required =
      R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],)"
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],"tool_choice":"required"})";
  EXPECT_EQ(error_of(required), "f line 7: Thinking mode does not support this tool_choice");
}

}  // namespace
}  // namespace deepinfer::api

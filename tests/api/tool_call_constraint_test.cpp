// When tools constrain an answer (api/tool_call_constraint.h), read from real request bodies of
// the three chat-style protocols: required and named always, auto only with a strict tool, none
// never; strict and the schema's field as each protocol spells them.
#include "api/tool_call_constraint.h"

#include <gtest/gtest.h>

#include <string>

#include "api/api_error.h"
#include "api_test_support.h"

namespace deepinfer::api {
namespace {

using Json = nlohmann::ordered_json;

const Json kParameters = Json::parse(R"({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})");

Json chat_body(const Json& extra) {
  Json body = {{"model", "m"},
               {"thinking", {{"type", "disabled"}}},
               {"messages", {{{"role", "user"}, {"content", "hi"}}}},
               {"tools",
                {{{"type", "function"}, {"function", {{"name", "search"}, {"parameters", kParameters}}}},
                 {{"type", "function"}, {"function", {{"name", "fetch"}, {"parameters", kParameters}, {"strict", true}}}}}}};
  for (const auto& [key, value] : extra.items()) body[key] = value;
  return body;
}

std::optional<ConstraintSpec> constraint_of(const std::string& protocol, const Json& body) {
  ApiRequest request = testing::parse_request(protocol, body);
  const RenderedPrompt prompt = render_prompt(request.conversation, PromptFormat::V41);
  return tool_call_constraint(request.conversation, prompt, PromptFormat::V41, request.options.constraint);
}

TEST(ToolCallConstraint, ForcedChoicesAlwaysConstrainEveryTool) {
  Json body = chat_body({{"tool_choice", "required"}});
  body["tools"][1]["function"].erase("strict");
  const std::optional<ConstraintSpec> required = constraint_of("chat_completions", body);
  ASSERT_TRUE(required);
  EXPECT_EQ(required->kind, ConstraintSpec::Kind::ToolCalls);
  EXPECT_EQ(required->tool_calls->mode, ToolCallSpec::Mode::Forced);
  EXPECT_FALSE(required->tool_calls->single_call);
  ASSERT_EQ(required->tool_calls->tools.size(), 2u);
  EXPECT_TRUE(required->tool_calls->tools[0].constrained);
  EXPECT_TRUE(required->tool_calls->tools[1].constrained);
  EXPECT_EQ(required->tool_calls->tools[0].field, "tools.0.function.parameters");

  const std::optional<ConstraintSpec> named =
      constraint_of("chat_completions", chat_body({{"tool_choice", {{"type", "function"}, {"function", {{"name", "fetch"}}}}}}));
  ASSERT_TRUE(named);
  EXPECT_TRUE(named->tool_calls->single_call);
  ASSERT_EQ(named->tool_calls->tools.size(), 1u);
  EXPECT_EQ(named->tool_calls->tools[0].name, "fetch");

  const std::optional<ConstraintSpec> one_at_a_time =
      constraint_of("chat_completions", chat_body({{"tool_choice", "required"}, {"parallel_tool_calls", false}}));
  ASSERT_TRUE(one_at_a_time);
  EXPECT_TRUE(one_at_a_time->tool_calls->single_call);
}

TEST(ToolCallConstraint, AutoConstrainsOnlyWithAStrictTool) {
  const std::optional<ConstraintSpec> strict = constraint_of("chat_completions", chat_body({}));
  ASSERT_TRUE(strict);
  EXPECT_EQ(strict->tool_calls->mode, ToolCallSpec::Mode::Optional);
  EXPECT_FALSE(strict->tool_calls->tools[0].constrained);  // search is not strict
  EXPECT_TRUE(strict->tool_calls->tools[1].constrained);
  EXPECT_TRUE(strict->tool_calls->tools[1].strict);

  Json loose = chat_body({});
  loose["tools"][1]["function"].erase("strict");
  EXPECT_FALSE(constraint_of("chat_completions", loose));
  EXPECT_FALSE(constraint_of("chat_completions", chat_body({{"tool_choice", "none"}})));
}

// With thinking on, a calls block may open straight from the reasoning (recipe §2), so the
// constraint covers the output from its first token; with thinking off it starts at the answer.
TEST(ToolCallConstraint, UnderAutoWithThinkingTheConstraintCoversTheReasoning) {
  const std::optional<ConstraintSpec> off = constraint_of("chat_completions", chat_body({}));
  ASSERT_TRUE(off);
  EXPECT_FALSE(off->tool_calls->from_reasoning);
  const std::optional<ConstraintSpec> on =
      constraint_of("chat_completions", chat_body({{"thinking", {{"type", "enabled"}}}}));
  ASSERT_TRUE(on);
  EXPECT_TRUE(on->tool_calls->from_reasoning);
}

TEST(ToolCallConstraint, AStrictToolUnderAutoKeepsTheResponseFormatForOtherAnswers) {
  const Json format = {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}}}}}};
  const std::optional<ConstraintSpec> both = constraint_of("chat_completions", chat_body({{"response_format", format}}));
  ASSERT_TRUE(both);
  ASSERT_TRUE(both->answer);
  EXPECT_EQ(both->answer->kind, ConstraintSpec::Kind::JsonSchema);
  try {
    constraint_of("chat_completions", chat_body({{"response_format", format}, {"tool_choice", "required"}}));
    ADD_FAILURE() << "a forced call beside a response_format was accepted";
  } catch (const ApiError& error) {
    EXPECT_EQ(error.status(), 400);
    EXPECT_EQ(error.param(), "tool_choice");
  }
}

TEST(ToolCallConstraint, AnthropicAndResponsesSpellStrictTheirWay) {
  const Json messages = {{"model", "m"},
                         {"max_tokens", 10},
                         {"thinking", {{"type", "disabled"}}},
                         {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                         {"tools", {{{"name", "fetch"}, {"input_schema", kParameters}, {"strict", true}}}},
                         {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}}};
  const std::optional<ConstraintSpec> anthropic = constraint_of("messages", messages);
  ASSERT_TRUE(anthropic);
  EXPECT_EQ(anthropic->tool_calls->mode, ToolCallSpec::Mode::Forced);
  EXPECT_TRUE(anthropic->tool_calls->single_call);
  EXPECT_TRUE(anthropic->tool_calls->tools[0].strict);
  EXPECT_EQ(anthropic->tool_calls->tools[0].field, "tools.0.input_schema");

  const Json responses = {{"model", "m"},
                          {"input", "hi"},
                          {"tools", {{{"type", "function"}, {"name", "fetch"}, {"parameters", kParameters}, {"strict", true}}}}};
  const std::optional<ConstraintSpec> openai = constraint_of("responses", responses);
  ASSERT_TRUE(openai);
  EXPECT_EQ(openai->tool_calls->mode, ToolCallSpec::Mode::Optional);
  EXPECT_EQ(openai->tool_calls->tools[0].field, "tools[0].parameters");
}

}  // namespace
}  // namespace deepinfer::api

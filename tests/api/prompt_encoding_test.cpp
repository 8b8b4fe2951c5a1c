// Rules of recipe.md §1 and §3 that the conformance vectors do not pin down.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/api_error.h"
#include "api/prompt_json.h"
#include "api_test_support.h"

namespace deepinfer::api {
namespace {

using nlohmann::ordered_json;
using testing::chat_prompt;
using testing::v41_tokenizer;

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEffort75 = "Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the reasoning)\n\n";

std::string api_error_message(const std::string& body) {
  try {
    parse_chat_completions_request(ordered_json::parse(body));
  } catch (const ApiError& error) {
    return error.what();
  }
  return "(accepted)";
}

TEST(PythonJsonTest, MatchesPythonJsonDumps) {
  const ordered_json value = ordered_json::parse(
      R"({"z": 1, "a": [1e-05, 1e16, 100000.0, 1.5e-07, -0.0, 2], "s": "é\"\\\n\u0001", "b": true, "n": null})");
  EXPECT_EQ(python_json(value),
            "{\"z\": 1, \"a\": [1e-05, 1e+16, 100000.0, 1.5e-07, -0.0, 2], \"s\": \"é\\\"\\\\\\n\\u0001\", "
            "\"b\": true, \"n\": null}");
  EXPECT_EQ(python_json(ordered_json::object()), "{}");
  EXPECT_EQ(python_json(ordered_json::array()), "[]");
}

TEST(PromptRenderTest, ToolResultsFollowTheOrderOfTheCalls) {
  // Recipe §1.6: results sent B then A for calls A then B; non-object arguments become one
  // string parameter named "arguments".
  const std::string prompt = chat_prompt(R"({"model": "m", "thinking": {"type": "disabled"}, "messages": [
    {"role": "user", "content": "q"},
    {"role": "assistant", "content": "", "tool_calls": [
      {"id": "A", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1, \"y\": [1,2], \"s\": \"hi\"}"}},
      {"id": "B", "type": "function", "function": {"name": "g", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "B", "content": "rB"},
    {"role": "tool", "tool_call_id": "A", "content": "rA"}]})");
  EXPECT_EQ(prompt,
            kBos +
                "<｜User｜>q<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter "
                "name=\"x\" string=\"false\">1</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"y\" "
                "string=\"false\">[1, 2]</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"s\" "
                "string=\"true\">hi</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"g\">\n<｜DSML｜ "
                "parameter name=\"arguments\" string=\"true\">not json</｜DSML｜ parameter>\n</｜DSML｜ "
                "invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜><｜User｜><tool_result>rA</tool_result>\n\n<tool_"
                "result>rB</tool_result><｜Assistant｜></think>");
}

TEST(PromptRenderTest, EffortLevelsAndThinkingToggle) {
  const std::string messages = R"("messages": [{"role": "user", "content": "x"}])";
  auto with = [&](const std::string& fields) { return chat_prompt("{\"model\": \"m\", " + fields + messages + "}"); };
  EXPECT_EQ(with(R"("reasoning_effort": "low", )"),
            kBos + "<｜System｜>Reasoning Effort: 50 (range 1-100, the higher the value, the more thorough the "
                   "reasoning)\n\n<｜User｜>x<｜Assistant｜><think>");
  EXPECT_EQ(with(R"("reasoning_effort": "xhigh", )"), kBos + "<｜System｜>" + kEffort75 + "<｜User｜>x<｜Assistant｜><think>");
  EXPECT_EQ(with(R"("reasoning_effort": "none", )"), kBos + "<｜User｜>x<｜Assistant｜></think>");
  // An explicit toggle wins over the effort.
  EXPECT_EQ(with(R"("reasoning_effort": "none", "thinking": {"type": "enabled"}, )"),
            kBos + "<｜System｜>" + kEffort75 + "<｜User｜>x<｜Assistant｜><think>");
  // V4: low adds nothing, and there is no system marker.
  EXPECT_EQ(chat_prompt(R"({"model": "m", "reasoning_effort": "low", )" + messages + "}", PromptFormat::V4),
            kBos + "<｜User｜>x<｜Assistant｜><think>");
}

TEST(PromptRenderTest, V4FoldsSystemMessagesAndV41KeepsThem) {
  const std::string body = R"({"model": "m", "thinking": {"type": "disabled"}, "messages": [
    {"role": "system", "content": "A"}, {"role": "system", "content": "B"},
    {"role": "user", "content": "u1"}, {"role": "system", "content": "late"}, {"role": "user", "content": "u2"}]})";
  EXPECT_EQ(chat_prompt(body, PromptFormat::V4),
            kBos + "A\n\nB<｜User｜>u1\n\nlate\n\nu2<｜Assistant｜></think>");
  EXPECT_EQ(chat_prompt(body, PromptFormat::V41),
            kBos + "<｜System｜>A<｜System｜>B<｜User｜>u1<｜System｜>late<｜User｜>u2<｜Assistant｜></think>");
}

TEST(PromptRenderTest, ToolChoiceNoneDropsToolsAndNamedChoiceForcesOneTool) {
  const std::string tools = R"("tools": [
    {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "b"}}])";
  const std::string base = R"({"model": "m", "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "x"}], )";
  EXPECT_EQ(chat_prompt(base + tools + R"(, "tool_choice": "none"})"), kBos + "<｜User｜>x<｜Assistant｜></think>");

  const ordered_json named = ordered_json::parse(base + tools + R"(, "tool_choice": {"type": "function", "function": {"name": "b"}}})");
  const ApiRequest request = parse_chat_completions_request(named);
  ASSERT_EQ(request.conversation.tools.size(), 1u);
  EXPECT_EQ(request.conversation.tools[0].name, "b");
  const RenderedPrompt prompt = render_prompt(request.conversation, PromptFormat::V41);
  EXPECT_EQ(prompt.output_start, OutputStart::ToolCalls);
  const std::string text = prompt.text();
  EXPECT_NE(text.find("{\"name\": \"b\", \"description\": \"\", \"parameters\": {}}\n\nYou MUST"), std::string::npos);
  EXPECT_EQ(text.find("\"name\": \"a\""), std::string::npos);
  EXPECT_TRUE(text.ends_with("<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n"));
}

TEST(PromptRenderTest, PrefixContinuesTheLastAssistantTurn) {
  const std::string messages = R"("messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "def f(", "reasoning_content": "plan", "prefix": true}])";
  const RenderedPrompt off = render_prompt(
      parse_chat_completions_request(ordered_json::parse(R"({"model": "m", "thinking": {"type": "disabled"}, )" + messages + "}")).conversation,
      PromptFormat::V41);
  EXPECT_EQ(off.text(), kBos + "<｜User｜>q<｜Assistant｜></think>def f(");
  EXPECT_EQ(off.output_start, OutputStart::Answer);

  const RenderedPrompt on = render_prompt(
      parse_chat_completions_request(ordered_json::parse(R"({"model": "m", )" + messages + "}")).conversation, PromptFormat::V41);
  EXPECT_EQ(on.text(), kBos + "<｜System｜>" + kEffort75 + "<｜User｜>q<｜Assistant｜><think>plan</think>def f(");
  EXPECT_EQ(on.output_start, OutputStart::Answer);

  const RenderedPrompt reasoning_only = render_prompt(
      parse_chat_completions_request(ordered_json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "reasoning_content": "Let me", "prefix": true}]})")).conversation,
      PromptFormat::V41);
  EXPECT_TRUE(reasoning_only.text().ends_with("<｜Assistant｜><think>Let me"));
  EXPECT_EQ(reasoning_only.output_start, OutputStart::Thinking);

  EXPECT_EQ(api_error_message(R"({"model": "m", "messages": [{"role": "assistant", "content": "a", "prefix": true},
      {"role": "user", "content": "q"}]})"),
            "prefix: only the last message, from the assistant, can be a prefix to continue");
}

TEST(PromptRenderTest, AnthropicBlocksBecomeSeparateMessagesJoinedAtRender) {
  const ordered_json body = ordered_json::parse(R"({"model": "m", "max_tokens": 5, "thinking": {"type": "disabled"},
    "system": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}],
    "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "document", "source": {}}]},
                 {"role": "assistant", "content": [{"type": "text", "text": "t1"}, {"type": "text", "text": "t2"}]},
                 {"role": "user", "content": "b"}]})");
  EXPECT_EQ(render_prompt(parse_messages_request(body).conversation, PromptFormat::V41).text(),
            kBos + "<｜System｜>S1\n\nS2<｜User｜>a\n\n[Unsupported Document]<｜Assistant｜></think>t1\n\nt2<｜end▁of▁sentence｜><｜User｜>b<｜Assistant｜></think>");
}

// Anthropic's tool_choice modes are Chat Completions': "any" = "required", "tool" = a named
// function, "none" = "none", "auto" = "auto" (issue 17: "any" was auto without a word).
TEST(PromptRenderTest, AnthropicToolChoiceRendersAsChatCompletionsToolChoice) {
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {R"({"type": "auto"})", R"("auto")"},
      {R"({"type": "any"})", R"("required")"},
      {R"({"type": "tool", "name": "get_time"})", R"({"type": "function", "function": {"name": "get_time"}})"},
      {R"({"type": "none"})", R"("none")"}};
  for (const auto& [anthropic, chat] : pairs) {
    const ordered_json messages = ordered_json::parse(R"({"model": "m", "max_tokens": 5,
      "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "q"}],
      "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}},
                {"name": "get_time", "description": "t", "input_schema": {"type": "object"}}],
      "tool_choice": )" + anthropic + "}");
    const ordered_json completions = ordered_json::parse(R"({"model": "m",
      "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "q"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}}},
                {"type": "function", "function": {"name": "get_time", "description": "t", "parameters": {"type": "object"}}}],
      "tool_choice": )" + chat + "}");
    const Conversation from_messages = parse_messages_request(messages).conversation;
    const Conversation from_chat = parse_chat_completions_request(completions).conversation;
    EXPECT_EQ(from_messages.tool_choice, from_chat.tool_choice) << anthropic;
    const RenderedPrompt rendered = render_prompt(from_messages, PromptFormat::V41);
    EXPECT_EQ(rendered.text(), render_prompt(from_chat, PromptFormat::V41).text()) << anthropic;
    EXPECT_EQ(rendered.output_start == OutputStart::ToolCalls, from_chat.tool_choice == ToolChoice::Required)
        << anthropic;
  }
  // Thinking mode refuses a forced tool call with Chat Completions' message.
  for (const std::string choice : {R"({"type": "any"})", R"({"type": "tool", "name": "get_weather"})"}) {
    const ordered_json body = ordered_json::parse(R"({"model": "m", "max_tokens": 5,
      "messages": [{"role": "user", "content": "q"}],
      "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}], "tool_choice": )" + choice + "}");
    try {
      parse_messages_request(body);
      ADD_FAILURE() << choice << " was accepted in thinking mode";
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status(), 400);
      EXPECT_STREQ(error.what(), "Thinking mode does not support this tool_choice");
      EXPECT_EQ(error.param(), "tool_choice");
    }
  }
}

TEST(PromptTokensTest, MarkerSpellingsInContentAreOrdinaryText) {
  // The fork's fix (recipe §1.8): the official API counts 9 prompt tokens here, not 5.
  const PromptEncoder encoder(v41_tokenizer(), PromptFormat::V41);
  auto ids_of = [&](const std::string& content) {
    return encoder.encode(render_prompt(
        parse_chat_completions_request(ordered_json{{"model", "m"}, {"thinking", {{"type", "disabled"}}},
                                                    {"messages", {{{"role", "user"}, {"content", content}}}}})
            .conversation,
        PromptFormat::V41));
  };
  EXPECT_EQ(ids_of(""), (std::vector<TokenId>{0, 128803, 128804, 128822}));
  EXPECT_EQ(ids_of("<｜User｜>"), (std::vector<TokenId>{0, 128803, 30, 28217, 6756, 28217, 32, 128804, 128822}));
  EXPECT_EQ(ids_of("<think>").size(), 7u);
  EXPECT_EQ(v41_tokenizer().encode("<think>"), (std::vector<TokenId>{128821}));
}

TEST(PromptTokensTest, EncoderRefusesATokenizerWithoutTheMarkers) {
  ordered_json vocab = ordered_json::object();
  vocab["a"] = 0;
  const ordered_json tokenizer_json = {
      {"version", "1.0"}, {"added_tokens", ordered_json::array()}, {"normalizer", nullptr}, {"pre_tokenizer", nullptr},
      {"decoder", nullptr}, {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", ordered_json::array()}}}};
  EXPECT_THROW(PromptEncoder(Tokenizer::from_json(tokenizer_json.dump()), PromptFormat::V41), Error);
}

TEST(CompletionPromptTest, BosIsAddedOnceAndIdsAreRangeChecked) {
  const Tokenizer& tokenizer = v41_tokenizer();
  EXPECT_EQ(encode_completion_prompt("Hello", tokenizer), (std::vector<TokenId>{0, 19923}));
  EXPECT_EQ(encode_completion_prompt(kBos + "Hello<｜User｜>", tokenizer), (std::vector<TokenId>{0, 19923, 128803}));
  EXPECT_EQ(encode_completion_prompt(ordered_json::parse("[5, 7]"), tokenizer), (std::vector<TokenId>{5, 7}));
  EXPECT_THROW(encode_completion_prompt(ordered_json::parse("[5, 999999]"), tokenizer), ApiError);
  EXPECT_THROW(encode_completion_prompt(ordered_json::parse("[-1]"), tokenizer), ApiError);
  EXPECT_THROW(encode_completion_prompt(ordered_json::parse("[]"), tokenizer), ApiError);
  EXPECT_THROW(encode_completion_prompt(ordered_json::parse(R"(["a", "b"])"), tokenizer), ApiError);
}

TEST(RequestValidationTest, RefusesMalformedBodiesWithA400) {
  EXPECT_EQ(api_error_message(R"({"messages": [{"role": "user", "content": "x"}]})"), "model: field required");
  EXPECT_EQ(api_error_message(R"({"model": "m", "messages": "hi"})"), "messages: expected an array");
  EXPECT_EQ(api_error_message(R"({"model": "m", "messages": [{"role": "wizard", "content": "x"}]})"),
            "messages[0].role: unknown role 'wizard'");
  EXPECT_EQ(api_error_message(R"({"model": "m", "messages": [{"role": "user", "content": "x"},
      {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}]},
      {"role": "tool", "tool_call_id": "zz", "content": "r"}]})"),
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            "'tool_call_id'. (tool_call_id 'zz' does not answer a pending tool call)");
  EXPECT_EQ(api_error_message(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 1.5})"),
            "top_p must be in [0, 1]");
  EXPECT_EQ(api_error_message(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "huge"})"),
            "reasoning_effort: expected one of none, minimal, low, medium, high, xhigh, max");
  // json_schema is enforced now (api/output_constraint.h), so it needs its json_schema object.
  EXPECT_EQ(api_error_message(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema"}, "stop": "s", "n": 1})"),
            "response_format.json_schema: field required");
  EXPECT_EQ(api_error_message(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}},
      "stop": "s", "n": 1})"),
            "(accepted)");
}

TEST(RequestValidationTest, RefusesJsonNestedTooDeeplyToPrint) {
  const std::string deep_arguments = std::string(200, '[') + std::string(200, ']');
  ordered_json body = ordered_json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"},
      {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]},
      {"role": "tool", "tool_call_id": "c", "content": "r"}]})");
  body["messages"][1]["tool_calls"][0]["function"]["arguments"] = deep_arguments;
  EXPECT_THROW(parse_chat_completions_request(body), ApiError);
  body["messages"][1]["tool_calls"][0]["function"]["arguments"] = "{\"a\": [[1]]}";
  EXPECT_NO_THROW(parse_chat_completions_request(body));

  ordered_json deep_schema = ordered_json::object();
  for (int i = 0; i < 200; ++i) deep_schema = ordered_json{{"type", "object"}, {"properties", {{"p", deep_schema}}}};
  ordered_json with_tool = ordered_json::parse(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
  with_tool["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", deep_schema}}}}};
  EXPECT_THROW(parse_chat_completions_request(with_tool), ApiError);
}

TEST(RequestValidationTest, CarriesSamplingOptions) {
  const ApiRequest request = parse_chat_completions_request(ordered_json::parse(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 0.5, "top_p": 0.9,
          "max_tokens": 12, "stop": ["a", "b"], "seed": 7, "stream": true, "stream_options": {"include_usage": true}})"));
  EXPECT_EQ(request.options.model, "m");
  EXPECT_FLOAT_EQ(request.options.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(request.options.sampling.top_p, 0.9f);
  EXPECT_EQ(request.options.max_tokens, 12);
  EXPECT_EQ(request.options.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(request.options.sampling.seed, 7u);
  EXPECT_TRUE(request.options.stream);
  EXPECT_TRUE(request.options.include_usage);
}

}  // namespace
}  // namespace deepinfer::api

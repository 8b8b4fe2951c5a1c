// Structured output through the server on the random-weight full-vocabulary model: whatever the
// weights, a constrained answer is inside its constraint (a regex, a choice, a JSON schema,
// json_object), ends only where the constraint is complete, or runs out at max_tokens with
// finish_reason "length"; constraints that cannot be enforced and the removed guided_* fields are
// 400s, never ignored.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <vector>

#include "server_fixture.h"
#include "sanitizer_scale.h"

namespace deepinfer::server::testing {
namespace {

using Json = nlohmann::json;

class StructuredOutput : public SharedServerTest {
 protected:
  // `body` with `extra` merged in, posted to `path`; returns the parsed answer.
  static Json post(const std::string& path, Json body, const Json& extra, int status) {
    body.update(extra);
    const auto result = server().client().Post(path, body.dump(), "application/json");
    EXPECT_TRUE(result);
    if (!result) return {};
    EXPECT_EQ(result->status, status) << result->body;
    return Json::parse(result->body, nullptr, false);
  }

  // A chat completion with `extra` merged into the body.
  static Json chat(const Json& extra, int status = 200) {
    return post("/v1/chat/completions",
                {{"model", "tiny"},
                 {"max_tokens", 40},
                 {"temperature", 1.0},
                 {"seed", 5},
                 {"thinking", {{"type", "disabled"}}},
                 {"messages", {{{"role", "user"}, {"content", "Answer in json, please."}}}}},
                extra, status);
  }

  static std::pair<std::string, std::string> answer(const Json& body) {
    const Json& choice = body.at("choices").at(0);
    const Json& content = choice.at("message").at("content");
    return {content.is_string() ? content.get<std::string>() : "", choice.at("finish_reason").get<std::string>()};
  }
};

TEST_F(StructuredOutput, ARegexAnswerMatchesTheRegex) {
  for (int seed = 1; seed <= 4; ++seed) {
    const auto [text, finish] = answer(chat({{"seed", seed}, {"structured_outputs", {{"regex", "[0-9]{2,4}-(yes|no)"}}}}));
    if (finish == "stop") EXPECT_TRUE(std::regex_match(text, std::regex("[0-9]{2,4}-(yes|no)"))) << text;
    else EXPECT_EQ(finish, "length") << text;
  }
}

TEST_F(StructuredOutput, AChoiceAnswerIsOneOfTheChoices) {
  for (int seed = 1; seed <= 4; ++seed) {
    const auto [text, finish] = answer(chat({{"seed", seed}, {"structured_outputs", {{"choice", {"red", "green", "blue"}}}}}));
    EXPECT_EQ(finish, "stop");
    EXPECT_TRUE(text == "red" || text == "green" || text == "blue") << text;
  }
}

TEST_F(StructuredOutput, AJsonSchemaAnswerIsAValidInstance) {
  const Json schema = {{"type", "object"},
                       {"properties", {{"ok", {{"type", "boolean"}}}, {"n", {{"type", "integer"}}}}},
                       {"required", {"ok", "n"}},
                       {"additionalProperties", false}};
  for (int seed = 1; seed <= 4; ++seed) {
    const auto [text, finish] = answer(chat(
        {{"seed", seed},
         {"max_tokens", 200},
         {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}}));
    if (finish != "stop") {
      EXPECT_EQ(finish, "length") << text;
      continue;
    }
    const Json parsed = Json::parse(text, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << text;
    EXPECT_EQ(parsed.size(), 2u) << text;
    EXPECT_TRUE(parsed.at("ok").is_boolean()) << text;
    // An integer of any length (nlohmann reads one past 64 bits as a double, so look at the text).
    EXPECT_TRUE(parsed.at("n").is_number_integer() ||
                (parsed.at("n").is_number() && std::regex_search(text, std::regex(R"re("n"\s*:\s*-?[0-9]+\s*[,}])re"))))
        << text;
  }
}

// Anthropic's JSON outputs: output_config.format (and the beta's output_format); the JSON lands
// in the text block.
TEST_F(StructuredOutput, AnAnthropicJsonOutputIsAValidInstance) {
  const Json schema = {{"type", "object"},
                       {"properties", {{"city", {{"type", "string"}, {"maxLength", 12}}}, {"rank", {{"enum", {1, 2, 3}}}}}},
                       {"required", {"city", "rank"}},
                       {"additionalProperties", false}};
  const auto messages = [](const Json& extra, int status) {
    return post("/v1/messages",
                {{"model", "tiny"},
                 {"max_tokens", 120},
                 {"temperature", 1.0},
                 {"thinking", {{"type", "disabled"}}},
                 {"messages", {{{"role", "user"}, {"content", "A city, as json."}}}}},
                extra, status);
  };
  int complete = 0;  // the schema is small: answers end well within max_tokens
  for (const char* field : {"output_config", "output_format"}) {
    const Json format = {{"type", "json_schema"}, {"schema", schema}};
    const Json answer = messages(std::string(field) == "output_config" ? Json{{"output_config", {{"format", format}}}}
                                                                        : Json{{"output_format", format}},
                                 200);
    const std::string stop = answer.value("stop_reason", "");
    std::string text;
    for (const Json& block : answer.at("content"))
      if (block.at("type") == "text") text += block.at("text").get<std::string>();
    if (stop != "end_turn") {
      EXPECT_EQ(stop, "max_tokens") << text;
      continue;
    }
    const Json parsed = Json::parse(text, nullptr, false);
    ASSERT_TRUE(parsed.is_object()) << field << ": " << text;
    EXPECT_EQ(parsed.size(), 2u) << text;
    EXPECT_TRUE(parsed.at("city").is_string()) << text;
    EXPECT_TRUE(parsed.at("rank") == 1 || parsed.at("rank") == 2 || parsed.at("rank") == 3) << text;
    ++complete;
  }
  EXPECT_GT(complete, 0);
  const Json bad_type = messages({{"output_config", {{"format", {{"type", "json"}, {"schema", schema}}}}}}, 400);
  EXPECT_EQ(bad_type.at("type"), "error") << bad_type.dump();  // Anthropic's error shape
  messages({{"output_format", {{"type", "json_schema"}, {"schema", schema}, {"strict", true}}}}, 400);
  messages({{"output_format", {{"type", "json_schema"}, {"schema", {{"type", "array"}, {"uniqueItems", true}}}}}}, 400);
}

TEST_F(StructuredOutput, WhatCannotBeEnforcedIsRefused) {
  const Json schema = {{"type", "array"}, {"uniqueItems", true}};
  const Json refused =
      chat({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}}, 400);
  EXPECT_NE(refused.dump().find("uniqueItems"), std::string::npos) << refused.dump();
  chat({{"structured_outputs", {{"regex", "(a"}}}}, 400);
  chat({{"structured_outputs", {{"regex", "a"}, {"choice", {"b"}}}}}, 400);  // two constraints
  chat({{"structured_outputs", {{"jsonn", "{}"}}}}, 400);                      // an unknown field
  const Json guided = chat({{"guided_json", {{"type", "object"}}}}, 400);
  EXPECT_NE(guided.dump().find("structured_outputs"), std::string::npos) << guided.dump();
}

// vLLM's disable_any_whitespace: the JSON comes compact (no whitespace outside strings).
TEST_F(StructuredOutput, DisableAnyWhitespaceGivesCompactJson) {
  const auto whitespace_outside_strings = [](const std::string& text) {
    bool in_string = false, escaped = false;
    for (const char c : text) {
      if (in_string) {
        if (escaped) escaped = false;
        else if (c == '\\') escaped = true;
        else if (c == '"') in_string = false;
      } else if (c == '"') {
        in_string = true;
      } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
        return true;
      }
    }
    return false;
  };
  const Json schema = {{"type", "object"}, {"properties", {{"xs", {{"type", "array"}, {"items", {{"type", "integer"}}}}}}}};
  int complete = 0;
  for (int seed = 1; seed <= 4; ++seed)
    for (const Json& outputs : {Json{{"json", schema}, {"disable_any_whitespace", true}},
                                Json{{"json_object", true}, {"disable_any_whitespace", true}}}) {
      const auto [text, finish] = answer(chat({{"seed", seed}, {"max_tokens", 80}, {"structured_outputs", outputs}}));
      EXPECT_FALSE(whitespace_outside_strings(text)) << text;
      if (finish == "stop") {
        EXPECT_TRUE(Json::parse(text, nullptr, false).is_object()) << text;
        ++complete;
      }
    }
  EXPECT_GT(complete, 0);
  chat({{"structured_outputs", {{"json_object", true}, {"disable_any_whitespace", "yes"}}}}, 400);
}

// A schema that asks for leniency ("x-guidance": {"lenient": true}, llguidance's convention) is
// compiled without what cannot be enforced, and every endpoint's answer says what that was.
TEST_F(StructuredOutput, ALenientSchemaIsAnsweredWithWhatItDoesNotEnforce) {
  Json schema = {{"type", "object"},
                 {"properties", {{"tags", {{"type", "array"}, {"items", {{"enum", {"a", "b"}}}}, {"uniqueItems", true}}}}},
                 {"required", {"tags"}},
                 {"additionalProperties", false}};
  const Json response_format = [&] {
    Json lenient = schema;
    lenient["x-guidance"] = {{"lenient", true}};
    return Json{{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", lenient}}}};
  }();
  const Json expected = Json::array({{{"type", "constraint_not_enforced"},
                                      {"param", "response_format.json_schema.schema"},
                                      {"pointer", "/properties/tags/uniqueItems"},
                                      {"message", "uniqueItems is not enforced (lenient)"}}});
  for (int seed = 1; seed <= 2; ++seed) {
    const Json body = chat({{"seed", seed}, {"max_tokens", 60}, {"response_format", response_format}});
    EXPECT_EQ(body.value("warnings", Json()), expected) << body.dump();
    const auto [text, finish] = answer(body);
    if (finish != "stop") continue;
    // Everything else the schema says still holds.
    const Json parsed = Json::parse(text, nullptr, false);
    ASSERT_TRUE(parsed.is_object() && parsed.size() == 1 && parsed.at("tags").is_array()) << text;
    for (const Json& tag : parsed.at("tags")) EXPECT_TRUE(tag == "a" || tag == "b") << text;
  }
  // Streaming: the first chunk carries them, no other does.
  const auto streamed = server().client().Post(
      "/v1/chat/completions",
      Json{{"model", "tiny"},
           {"max_tokens", 8},
           {"stream", true},
           {"thinking", {{"type", "disabled"}}},
           {"response_format", response_format},
           {"messages", {{{"role", "user"}, {"content", "x"}}}}}
          .dump(),
      "application/json");
  ASSERT_TRUE(streamed);
  const std::vector<std::string> lines = sse_data_lines(streamed->body);
  ASSERT_GE(lines.size(), 2u) << streamed->body;
  EXPECT_EQ(Json::parse(lines[0]).value("warnings", Json()), expected) << lines[0];
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) EXPECT_FALSE(Json::parse(lines[i]).contains("warnings")) << lines[i];
  // Messages, through a lenient tool schema under a forced tool choice.
  Json tool_schema = schema;
  tool_schema["x-guidance"] = {{"lenient", true}};
  const Json message = post("/v1/messages",
                            {{"model", "tiny"},
                             {"max_tokens", 60},
                             {"thinking", {{"type", "disabled"}}},
                             {"tools", {{{"name", "tag"}, {"input_schema", tool_schema}}}},
                             {"tool_choice", {{"type", "tool"}, {"name", "tag"}}},
                             {"messages", {{{"role", "user"}, {"content", "x"}}}}},
                            Json::object(), 200);
  ASSERT_EQ(message.value("warnings", Json()).size(), 1u) << message.dump();
  EXPECT_EQ(message.at("warnings")[0].at("param"), "tools.0.input_schema") << message.dump();
  EXPECT_EQ(message.at("warnings")[0].at("pointer"), "/properties/tags/uniqueItems") << message.dump();
  // Without the option the same schema is a 400 that says how to ask for it; a schema that is
  // enforced whole has no warnings; an option deepinfer does not read is a 400 naming it.
  const Json refused = chat(
      {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}}, 400);
  EXPECT_NE(refused.dump().find("x-guidance"), std::string::npos) << refused.dump();
  schema["properties"]["tags"].erase("uniqueItems");
  const Json plain = chat(
      {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}});
  EXPECT_FALSE(plain.contains("warnings")) << plain.dump();
  schema["x-guidance"] = {{"coerce_one_of", true}};
  const Json unknown = chat(
      {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}}, 400);
  EXPECT_NE(unknown.dump().find("/x-guidance/coerce_one_of"), std::string::npos) << unknown.dump();
}

// Constrained tool calls. The forecast tool's arguments, and why `arguments` (JSON text) is not a
// valid instance of them (empty when it is).
const Json& forecast_tool_parameters() {
  static const Json parameters = {
      {"type", "object"},
      {"properties",
       {{"unit", {{"enum", {"celsius", "fahrenheit"}}}},
        {"days", {{"type", "integer"}, {"minimum", 1}, {"maximum", 7}}},
        {"city", {{"type", "string"}, {"maxLength", 6}}},
        {"hourly", {{"type", "boolean"}}}}},
      {"required", {"unit", "days"}},
      {"additionalProperties", false}};
  return parameters;
}

std::string forecast_arguments_problem(const Json& arguments) {
  if (!arguments.is_object()) return "not an object";
  if (!arguments.contains("unit") || !arguments.contains("days")) return "a required key is missing";
  for (const auto& [key, value] : arguments.items()) {
    if (key == "unit" && value != "celsius" && value != "fahrenheit") return "unit is not in the enum";
    // JSON Schema's integer is a number with no fractional part (5.0 too, drafts 6 on).
    if (key == "days" && (!value.is_number() || value.get<double>() != static_cast<double>(static_cast<int64_t>(value.get<double>())) ||
                          value.get<double>() < 1 || value.get<double>() > 7))
      return "days is not an integer in 1..7";
    if (key == "city") {
      if (!value.is_string()) return "city is not a string";
      const std::string& city = value.get_ref<const std::string&>();
      if (std::count_if(city.begin(), city.end(), [](char c) { return (c & 0xC0) != 0x80; }) > 6) return "city is too long";
    }
    if (key == "hourly" && !value.is_boolean()) return "hourly is not a boolean";
    if (key != "unit" && key != "days" && key != "city" && key != "hourly") return "undeclared key " + key;
  }
  return "";
}

Json chat_tools(bool strict_forecast) {
  Json forecast = {{"name", "get_forecast"}, {"parameters", forecast_tool_parameters()}};
  if (strict_forecast) forecast["strict"] = true;
  return Json::array({{{"type", "function"}, {"function", forecast}},
                      {{"type", "function"},
                       {"function", {{"name", "get_time"}, {"parameters", {{"type", "object"}, {"properties", Json::object()}}}}}}});
}

// tool_choice naming a function, on random weights at temperature 1: whatever the model, the
// answer is exactly one call of that function with arguments valid against its parameters.
TEST_F(StructuredOutput, ANamedToolChoiceGivesOneSchemaValidCall) {
  int complete = 0;
  for (int seed = 1; seed <= deepinfer::testing::release_or_sanitized(4, 1); ++seed) {
    const Json body = chat({{"seed", seed},
                            {"max_tokens", 400},
                            {"tools", chat_tools(false)},
                            {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_forecast"}}}}}});
    const Json& choice = body.at("choices").at(0);
    if (choice.at("finish_reason") == "length") continue;
    ASSERT_EQ(choice.at("finish_reason"), "tool_calls") << body.dump();
    const Json& calls = choice.at("message").at("tool_calls");
    ASSERT_EQ(calls.size(), 1u) << body.dump();
    EXPECT_EQ(calls[0].at("function").at("name"), "get_forecast");
    const std::string arguments = calls[0].at("function").at("arguments").get<std::string>();
    EXPECT_EQ(forecast_arguments_problem(Json::parse(arguments, nullptr, false)), "") << arguments;
    ++complete;
  }
  EXPECT_GT(complete, 0);
}

// tool_choice required (Anthropic's any, and a named tool) likewise: one or more calls, each valid.
TEST_F(StructuredOutput, RequiredAndAnthropicToolChoicesGiveSchemaValidCalls) {
  int complete = 0;
  for (int seed = 1; seed <= deepinfer::testing::release_or_sanitized(3, 1); ++seed) {
    const Json body = chat({{"seed", seed}, {"max_tokens", 400}, {"tools", chat_tools(false)}, {"tool_choice", "required"}});
    const Json& choice = body.at("choices").at(0);
    if (choice.at("finish_reason") == "length") continue;
    ASSERT_EQ(choice.at("finish_reason"), "tool_calls") << body.dump();
    for (const Json& call : choice.at("message").at("tool_calls")) {
      const Json arguments = Json::parse(call.at("function").at("arguments").get<std::string>(), nullptr, false);
      if (call.at("function").at("name") == "get_forecast") {
        EXPECT_EQ(forecast_arguments_problem(arguments), "") << arguments.dump();
      } else {
        EXPECT_EQ(call.at("function").at("name"), "get_time");
        EXPECT_EQ(arguments, Json::object());
      }
    }
    ++complete;
  }
  const std::vector<Json> anthropic_choices = {Json{{"type", "any"}}, Json{{"type", "tool"}, {"name", "get_forecast"}}};
  for (std::size_t i = 0; i < anthropic_choices.size(); ++i) {
    if (deepinfer::testing::kUnderSanitizer && i % 2 == 0) continue;  // the named one only
    const Json& tool_choice = anthropic_choices[i];
    const Json answer = post("/v1/messages",
                             {{"model", "tiny"},
                              {"max_tokens", 400},
                              {"temperature", 1.0},
                              {"thinking", {{"type", "disabled"}}},
                              {"tools", {{{"name", "get_forecast"}, {"input_schema", forecast_tool_parameters()}}}},
                              {"tool_choice", tool_choice},
                              {"messages", {{{"role", "user"}, {"content", "Forecast?"}}}}},
                             Json::object(), 200);
    if (answer.at("stop_reason") == "max_tokens") continue;
    ASSERT_EQ(answer.at("stop_reason"), "tool_use") << answer.dump();
    for (const Json& block : answer.at("content")) {
      if (block.at("type") == "tool_use") {
        EXPECT_EQ(forecast_arguments_problem(block.at("input")), "") << block.dump();
      }
    }
    ++complete;
  }
  EXPECT_GT(complete, 0);
}

// auto with a strict tool: free text, or calls whose strict arguments are valid.
TEST_F(StructuredOutput, UnderAutoAStrictToolsCallIsSchemaValid) {
  for (int seed = 1; seed <= deepinfer::testing::release_or_sanitized(3, 1); ++seed) {
    const Json body = chat({{"seed", seed}, {"max_tokens", 120}, {"tools", chat_tools(true)}});
    const Json& message = body.at("choices").at(0).at("message");
    if (!message.contains("tool_calls")) continue;
    if (body.at("choices").at(0).at("finish_reason") != "tool_calls") continue;  // a call cut short
    for (const Json& call : message.at("tool_calls")) {
      if (call.at("function").at("name") != "get_forecast") continue;
      const std::string arguments = call.at("function").at("arguments").get<std::string>();
      EXPECT_EQ(forecast_arguments_problem(Json::parse(arguments, nullptr, false)), "") << arguments;
    }
  }
}

TEST_F(StructuredOutput, AStrictToolWhoseSchemaCannotBeEnforcedIsRefused) {
  const Json unique = {{"type", "object"}, {"properties", {{"xs", {{"type", "array"}, {"uniqueItems", true}}}}}};
  const Json strict_tool = {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", unique}, {"strict", true}}}};
  const Json refused = chat({{"tools", {strict_tool}}}, 400);
  EXPECT_EQ(refused.at("error").at("param"), "tools.0.function.parameters") << refused.dump();
  EXPECT_NE(refused.dump().find("/properties/xs/uniqueItems"), std::string::npos) << refused.dump();
  // Not strict: under auto the tool is unconstrained, so nothing needs compiling.
  const Json loose_tool = {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", unique}}}};
  chat({{"tools", {loose_tool}}}, 200);
  // Required always constrains, strict or not.
  chat({{"tools", {loose_tool}}, {"tool_choice", "required"}}, 400);
  const Json anthropic = post("/v1/messages",
                              {{"model", "tiny"},
                               {"max_tokens", 10},
                               {"tools", {{{"name", "f"}, {"input_schema", unique}, {"strict", true}}}},
                               {"messages", {{{"role", "user"}, {"content", "x"}}}}},
                              Json::object(), 400);
  EXPECT_NE(anthropic.dump().find("tools.0.input_schema/properties/xs/uniqueItems"), std::string::npos) << anthropic.dump();
}

}  // namespace
}  // namespace deepinfer::server::testing

// Structured output through the server on the random-weight full-vocabulary model: whatever the
// weights, a constrained answer is inside its constraint (a regex, a choice, a JSON schema,
// json_object), ends only where the constraint is complete, or runs out at max_tokens with
// finish_reason "length"; constraints that cannot be enforced and the removed guided_* fields are
// 400s, never ignored.
#include <gtest/gtest.h>

#include <regex>

#include "server_fixture.h"

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

}  // namespace
}  // namespace deepinfer::server::testing

// The DSML tool-call grammar against the real output parser: random sentences of the grammar
// (every one in its language by construction, and the matcher agrees) parse back into calls of
// the given tools whose arguments a hand-written validator of the test schemas accepts; the
// renderer's own spelling of a past call is accepted; bad calls are rejected; schemas that cannot
// be enforced are 400s naming the field.
#include "api/tool_call_grammar.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "api/api_error.h"
#include "api/output_constraint.h"
#include "api/output_parser.h"
#include "api/prompt_renderer.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"

namespace deepinfer::api {
namespace {

using Json = nlohmann::ordered_json;
using grammar::Grammar;

// Forecast arguments: exercises raw strings with bounds, string enums, bounded integers,
// booleans, arrays, a nested (strict: closed) object and a string-or-null.
const Json kForecastSchema = Json::parse(R"({
  "type": "object",
  "properties": {
    "city": {"type": "string", "minLength": 1, "maxLength": 12},
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "hourly": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
    "where": {"type": "object", "properties": {"lat": {"type": "number", "minimum": -90, "maximum": 90},
                                                "lon": {"type": "number", "minimum": -180, "maximum": 180}},
              "required": ["lat", "lon"]},
    "note": {"type": ["string", "null"], "maxLength": 20}
  },
  "required": ["city", "days"],
  "additionalProperties": false
})");

const Json kClockSchema = Json::parse(R"({
  "type": "object",
  "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
  "required": ["zone"]
})");

std::size_t code_points(const std::string& text) {
  return static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// Why `arguments` (JSON text) is not a valid forecast / clock call; empty when it is.
std::string forecast_problem(const std::string& arguments) {
  const Json args = Json::parse(arguments, nullptr, false);
  if (!args.is_object()) return "not a JSON object";
  for (const auto& [key, value] : args.items()) {
    if (key == "city") {
      if (!value.is_string()) return "city is not a string";
      const std::size_t n = code_points(value.get<std::string>());
      if (n < 1 || n > 12) return "city's length is out of bounds";
    } else if (key == "unit") {
      if (value != "celsius" && value != "fahrenheit") return "unit is not in the enum";
    } else if (key == "days") {
      // JSON Schema's integer is a number with no fractional part (5.0 too, drafts 6 on).
      if (!value.is_number() || value.get<double>() != static_cast<double>(static_cast<int64_t>(value.get<double>())) ||
          value.get<double>() < 1 || value.get<double>() > 7)
        return "days is not an integer in 1..7";
    } else if (key == "hourly") {
      if (!value.is_boolean()) return "hourly is not a boolean";
    } else if (key == "tags") {
      if (!value.is_array() || value.size() > 3) return "tags is not an array of at most 3";
      for (const Json& tag : value)
        if (!tag.is_string() || code_points(tag.get<std::string>()) > 5) return "a tag is not a short string";
    } else if (key == "where") {
      if (!value.is_object() || value.size() != 2 || !value.contains("lat") || !value.contains("lon")) return "where is not {lat, lon}";
      if (!value.at("lat").is_number() || std::abs(value.at("lat").get<double>()) > 90 || !value.at("lon").is_number() ||
          std::abs(value.at("lon").get<double>()) > 180)
        return "where's lat / lon are not numbers in range";
    } else if (key == "note") {
      if (!value.is_null() && !(value.is_string() && code_points(value.get<std::string>()) <= 20)) return "note is wrong";
    } else {
      return "undeclared key " + key;
    }
  }
  if (!args.contains("city") || !args.contains("days")) return "a required key is missing";
  return "";
}

std::string clock_problem(const std::string& arguments) {
  const Json args = Json::parse(arguments, nullptr, false);
  if (!args.is_object() || !args.contains("zone") || !args.at("zone").is_string()) return "no zone string";
  const std::string zone = args.at("zone").get<std::string>();
  if (zone.size() != 3 || !std::all_of(zone.begin(), zone.end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
    return "zone does not match ^[A-Z]{3}$";
  return "";
}

ToolCallSpec spec_of(ToolCallSpec::Mode mode, PromptFormat format, bool strict = true) {
  ToolCallSpec spec;
  spec.mode = mode;
  spec.format = format;
  spec.tools.push_back({"get_forecast", kForecastSchema, strict, true, "tools.0.function.parameters"});
  spec.tools.push_back({"get_time", kClockSchema, strict, true, "tools.1.function.parameters"});
  return spec;
}

// A random sentence of `g`: random alternatives until the budget is spent, then the shortest
// ones; bytes drawn from each terminal's set, the troublesome ones (quotes, backslashes, '<',
// newlines, the first byte of '｜') often.
class SentenceSampler {
 public:
  explicit SentenceSampler(const Grammar& g) : g_(g), shortest_(static_cast<std::size_t>(g.rule_count()), kInfinite) {
    for (bool changed = true; changed;) {
      changed = false;
      for (grammar::RuleId r = 0; r < g.rule_count(); ++r)
        for (const grammar::Sequence& alternative : g.alternatives(r)) {
          const int64_t length = length_of(alternative);
          if (length < shortest_[static_cast<std::size_t>(r)]) {
            shortest_[static_cast<std::size_t>(r)] = length;
            changed = true;
          }
        }
    }
  }

  std::string sample(std::mt19937& rng, int budget) const {
    std::string out;
    std::vector<grammar::Symbol> stack{grammar::Grammar::rule(g_.start())};
    int expansions = 0;
    while (!stack.empty()) {
      const grammar::Symbol symbol = stack.back();
      stack.pop_back();
      if (!symbol.is_rule) {
        out += static_cast<char>(byte_from(g_.terminal_set(symbol.index), rng));
        continue;
      }
      const auto& alternatives = g_.alternatives(symbol.index);
      std::vector<std::size_t> usable;
      for (std::size_t i = 0; i < alternatives.size(); ++i)
        if (length_of(alternatives[i]) < kInfinite) usable.push_back(i);
      std::size_t pick = usable[rng() % usable.size()];
      if (++expansions > budget || static_cast<int>(out.size()) > 4 * budget) {
        for (const std::size_t i : usable)
          if (length_of(alternatives[i]) < length_of(alternatives[pick])) pick = i;
      }
      const grammar::Sequence& chosen = alternatives[pick];
      for (auto it = chosen.rbegin(); it != chosen.rend(); ++it) stack.push_back(*it);
    }
    return out;
  }

 private:
  static constexpr int64_t kInfinite = std::numeric_limits<int64_t>::max() / 4;

  int64_t length_of(const grammar::Sequence& sequence) const {
    int64_t total = 0;
    for (const grammar::Symbol& s : sequence) {
      // A terminal matching no byte (a rule that matches nothing) is never finished.
      total += s.is_rule ? shortest_[static_cast<std::size_t>(s.index)] : g_.terminal_set(s.index).empty() ? kInfinite : 1;
      if (total >= kInfinite) return kInfinite;
    }
    return total;
  }

  static uint8_t byte_from(const grammar::ByteSet& set, std::mt19937& rng) {
    static const uint8_t kTroublesome[] = {'"', '\\', '<', '/', '\n', 0xEF, '{', '}'};
    if (rng() % 3 == 0) {
      std::vector<uint8_t> hits;
      for (const uint8_t b : kTroublesome)
        if (set.contains(b)) hits.push_back(b);
      if (!hits.empty()) return hits[rng() % hits.size()];
    }
    std::vector<uint8_t> members;
    for (int b = 0; b < 256; ++b)
      if (set.contains(static_cast<uint8_t>(b))) members.push_back(static_cast<uint8_t>(b));
    return members[rng() % members.size()];
  }

  const Grammar& g_;
  std::vector<int64_t> shortest_;
};

struct ParsedAnswer {
  std::string content;
  std::vector<std::string> names;
  std::vector<std::string> arguments;
};

// `text` through the output parser in pieces of random sizes, as the server feeds it.
ParsedAnswer parse(const std::string& text, bool start_in_tool_calls, std::mt19937& rng, bool thinking = false) {
  OutputParsingOptions options;
  options.parse_tool_calls = true;
  options.start_in_tool_calls = start_in_tool_calls;
  options.thinking = thinking;
  OutputParser parser(options);
  ParsedAnswer out;
  const auto take = [&](const std::vector<OutputEvent>& events) {
    for (const OutputEvent& event : events) {
      if (event.kind == OutputEvent::Kind::content_delta) out.content += event.text;
      if (event.kind == OutputEvent::Kind::tool_call_start) {
        out.names.push_back(event.text);
        out.arguments.emplace_back();
      }
      if (event.kind == OutputEvent::Kind::tool_call_arguments_delta)
        out.arguments.at(static_cast<std::size_t>(event.tool_index)) += event.text;
    }
  };
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t n = std::min<std::size_t>(1 + rng() % 7, text.size() - at);
    take(parser.feed(std::string_view(text).substr(at, n)));
    at += n;
  }
  take(parser.finish());
  return out;
}

std::string problem_of(const std::string& name, const std::string& arguments) {
  if (name == "get_forecast") return forecast_problem(arguments);
  if (name == "get_time") return clock_problem(arguments);
  return "unknown tool " + name;
}

TEST(ToolCallGrammar, EveryForcedSentenceParsesIntoSchemaValidCalls) {
  for (const PromptFormat format : {PromptFormat::V41, PromptFormat::V4}) {
    const Grammar g = tool_call_grammar(spec_of(ToolCallSpec::Mode::Forced, format), nullptr);
    const SentenceSampler sampler(g);
    std::mt19937 rng(7);
    std::size_t calls = 0;
    for (int n = 0; n < 300; ++n) {
      const std::string text = sampler.sample(rng, 60 + n);
      ASSERT_TRUE(grammar::matches(g, text)) << text;
      const ParsedAnswer answer = parse(text, /*start_in_tool_calls=*/true, rng);
      ASSERT_FALSE(answer.names.empty()) << text;
      EXPECT_EQ(answer.content, "") << text;
      for (std::size_t k = 0; k < answer.names.size(); ++k)
        EXPECT_EQ(problem_of(answer.names[k], answer.arguments[k]), "") << answer.arguments[k] << "\nfrom\n" << text;
      calls += answer.names.size();
    }
    EXPECT_GT(calls, 300u);  // several calls per answer happen too
  }
}

TEST(ToolCallGrammar, ANamedChoiceIsExactlyOneCallOfThatTool) {
  ToolCallSpec spec = spec_of(ToolCallSpec::Mode::Forced, PromptFormat::V41);
  spec.tools.erase(spec.tools.begin());
  spec.single_call = true;
  const Grammar g = tool_call_grammar(spec, nullptr);
  const SentenceSampler sampler(g);
  std::mt19937 rng(3);
  for (int n = 0; n < 100; ++n) {
    const std::string text = sampler.sample(rng, 40);
    const ParsedAnswer answer = parse(text, true, rng);
    ASSERT_EQ(answer.names.size(), 1u) << text;
    EXPECT_EQ(answer.names[0], "get_time");
    EXPECT_EQ(clock_problem(answer.arguments[0]), "") << text;
  }
  const std::string one =
      "<｜DSML｜ invoke name=\"get_time\">\n<｜DSML｜ parameter name=\"zone\" string=\"true\">UTC</｜DSML｜ parameter>\n"
      "</｜DSML｜ invoke>";
  EXPECT_TRUE(grammar::matches(g, one + "\n</｜DSML｜ calls>"));
  EXPECT_FALSE(grammar::matches(g, one + "\n" + one + "\n</｜DSML｜ calls>"));
}

// The grammar accepts exactly the renderer's spelling of past calls (the form the model learnt).
TEST(ToolCallGrammar, TheRenderersSpellingOfPastCallsIsAccepted) {
  for (const PromptFormat format : {PromptFormat::V41, PromptFormat::V4}) {
    Conversation conversation;
    conversation.thinking = false;
    conversation.messages.push_back(Message{Role::User, text_content("Weather?"), {}, {}, {}, false});
    Message assistant{Role::Assistant, {}, {}, {}, {}, false};
    assistant.tool_calls.push_back(
        {"call_0", "get_forecast",
         R"({"city": "Pa \"N\"\n", "days": 3, "tags": ["a", "b"], "where": {"lat": 48.8, "lon": 2.35}, "note": null})"});
    assistant.tool_calls.push_back({"call_1", "get_time", R"({"zone": "CET"})"});
    conversation.messages.push_back(assistant);
    conversation.messages.push_back(Message{Role::Tool, text_content("rain"), {}, {}, "call_0", false});
    conversation.messages.push_back(Message{Role::Tool, text_content("noon"), {}, {}, "call_1", false});
    const std::string prompt = render_prompt(conversation, format).text();
    const std::string open = format == PromptFormat::V4 ? "<｜DSML｜tool_calls>\n" : "<｜DSML｜ calls>\n";
    const std::string close = format == PromptFormat::V4 ? "</｜DSML｜tool_calls>" : "</｜DSML｜ calls>";
    const std::size_t begin = prompt.find(open);
    const std::size_t end = prompt.find(close);
    ASSERT_NE(begin, std::string::npos) << prompt;
    ASSERT_NE(end, std::string::npos) << prompt;
    const std::string forced = prompt.substr(begin + open.size(), end + close.size() - begin - open.size());
    EXPECT_TRUE(grammar::matches(tool_call_grammar(spec_of(ToolCallSpec::Mode::Forced, format), nullptr), forced))
        << forced;
    EXPECT_TRUE(grammar::matches(tool_call_grammar(spec_of(ToolCallSpec::Mode::Optional, format), nullptr),
                                 "\n\n" + open + forced))
        << forced;
  }
}

TEST(ToolCallGrammar, BadCallsAreRejected) {
  const Grammar g = tool_call_grammar(spec_of(ToolCallSpec::Mode::Forced, PromptFormat::V41), nullptr);
  const auto call = [](const std::string& name, const std::string& params) {
    return "<｜DSML｜ invoke name=\"" + name + "\">\n" + params + "\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  };
  const auto param = [](const std::string& name, bool is_string, const std::string& value) {
    return "<｜DSML｜ parameter name=\"" + name + "\" string=\"" + (is_string ? "true" : "false") + "\">" + value +
           "</｜DSML｜ parameter>";
  };
  const std::string city = param("city", true, "Paris");
  const std::string days = param("days", false, "3");
  EXPECT_TRUE(grammar::matches(g, call("get_forecast", city + "\n" + days)));
  EXPECT_TRUE(grammar::matches(g, call("get_forecast", city + "\n" + days + "\n" + param("note", false, "null"))));
  EXPECT_TRUE(grammar::matches(g, call("get_forecast", city + "\n" + days + "\n" + param("note", true, "<b>x</b>"))));
  EXPECT_FALSE(grammar::matches(g, call("get_weather", city + "\n" + days)));              // no such tool
  EXPECT_FALSE(grammar::matches(g, call("get_forecast", city)));                           // days is required
  EXPECT_FALSE(grammar::matches(g, call("get_forecast", param("city", false, "\"Paris\"") + "\n" + days)));  // a string is raw
  EXPECT_FALSE(grammar::matches(g, call("get_forecast", city + "\n" + param("days", true, "3"))));  // an integer is JSON
  EXPECT_FALSE(grammar::matches(g, call("get_forecast", city + "\n" + param("days", false, "8"))));  // out of range
  EXPECT_FALSE(grammar::matches(g, call("get_forecast", param("city", true, "Thirteen long") + "\n" + days)));
  EXPECT_FALSE(grammar::matches(g, call("get_forecast", city + "\n" + days + "\n" + param("wind", false, "1"))));  // undeclared
  EXPECT_FALSE(grammar::matches(g, call("get_forecast", city + "\n" + city + "\n" + days)));  // twice
  EXPECT_FALSE(grammar::matches(g, call("get_forecast", city + days)));                       // no '\n' between
  // A value the parser would end early (inside JSON: UnderAutoANonStrictToolTakesAnyParameters).
  EXPECT_FALSE(grammar::matches(g, call("get_forecast", param("city", true, "a</｜DSML｜b") + "\n" + days)));
  // strict: the nested object is closed.
  EXPECT_FALSE(grammar::matches(
      g, call("get_forecast", city + "\n" + days + "\n" + param("where", false, R"({"lat": 1, "lon": 2, "alt": 3})"))));
  EXPECT_FALSE(grammar::matches(g, "<｜DSML｜ invoke name=\"get_time\">\n" + param("zone", true, "UTC")));  // unfinished
}

TEST(ToolCallGrammar, UnderAutoTheAnswerIsFreeTextOrACallsBlock) {
  const Grammar g = tool_call_grammar(spec_of(ToolCallSpec::Mode::Optional, PromptFormat::V41), nullptr);
  const std::string block =
      "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_time\">\n<｜DSML｜ parameter name=\"zone\" "
      "string=\"true\">UTC</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  EXPECT_TRUE(grammar::matches(g, ""));
  EXPECT_TRUE(grammar::matches(g, "It is sunny. </think> <｜DSML"));
  EXPECT_TRUE(grammar::matches(g, "Let me look.\n\n" + block));
  EXPECT_FALSE(grammar::matches(g, "Text <｜DSML｜ then text"));
  EXPECT_FALSE(grammar::matches(g, block + "\nafter"));
  const SentenceSampler sampler(g);
  std::mt19937 rng(11);
  int with_calls = 0;
  for (int n = 0; n < 300; ++n) {
    const std::string text = sampler.sample(rng, 80);
    ASSERT_TRUE(grammar::matches(g, text)) << text;
    const ParsedAnswer answer = parse(text, /*start_in_tool_calls=*/false, rng);
    for (std::size_t k = 0; k < answer.names.size(); ++k)
      EXPECT_EQ(problem_of(answer.names[k], answer.arguments[k]), "") << text;
    with_calls += answer.names.empty() ? 0 : 1;
  }
  EXPECT_GT(with_calls, 30);
}

// auto with thinking on: the output starts in the reasoning, from which the parser also takes a
// calls block (recipe §2), so such a block is held to the schemas as one after </think> is.
TEST(ToolCallGrammar, UnderAutoWithThinkingABlockFromTheReasoningIsConstrainedToo) {
  ToolCallSpec spec = spec_of(ToolCallSpec::Mode::Optional, PromptFormat::V41);
  spec.from_reasoning = true;
  const Grammar g = tool_call_grammar(spec, nullptr);
  const auto block = [](const std::string& zone) {
    return "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_time\">\n<｜DSML｜ parameter name=\"zone\" "
           "string=\"true\">" + zone + "</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  };
  EXPECT_TRUE(grammar::matches(g, ""));
  EXPECT_TRUE(grammar::matches(g, "Thinking it over"));  // the output may end in its reasoning
  EXPECT_TRUE(grammar::matches(g, "Need the time.\n\n" + block("UTC")));
  EXPECT_TRUE(grammar::matches(g, "Need the time.</think>Let me look.\n\n" + block("UTC")));
  EXPECT_TRUE(grammar::matches(g, "Sunny.</think>It is sunny."));
  EXPECT_FALSE(grammar::matches(g, "Need the time.\n\n" + block("utc")));  // zone is ^[A-Z]{3}$
  EXPECT_FALSE(grammar::matches(g, "Need the time.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"nope\">"));
  EXPECT_FALSE(grammar::matches(g, "Need <｜DSML｜ then more reasoning"));
  EXPECT_FALSE(grammar::matches(g, "Done.</think>Text <｜DSML｜ then text"));
  const SentenceSampler sampler(g);
  std::mt19937 rng(12);
  int from_reasoning = 0;
  for (int n = 0; n < 300; ++n) {
    const std::string text = sampler.sample(rng, 80);
    ASSERT_TRUE(grammar::matches(g, text)) << text;
    const ParsedAnswer answer = parse(text, /*start_in_tool_calls=*/false, rng, /*thinking=*/true);
    for (std::size_t k = 0; k < answer.names.size(); ++k)
      EXPECT_EQ(problem_of(answer.names[k], answer.arguments[k]), "") << text;
    from_reasoning += !answer.names.empty() && text.find("</think>") == std::string::npos ? 1 : 0;
  }
  EXPECT_GT(from_reasoning, 20);
}

// auto with a strict and a non-strict tool: the strict one's arguments are constrained, the other's
// are any well-formed parameters.
TEST(ToolCallGrammar, UnderAutoANonStrictToolTakesAnyParameters) {
  ToolCallSpec spec = spec_of(ToolCallSpec::Mode::Optional, PromptFormat::V41);
  spec.tools[1].strict = false;
  spec.tools[1].constrained = false;
  const Grammar g = tool_call_grammar(spec, nullptr);
  EXPECT_TRUE(grammar::matches(g,
                               "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_time\">\n<｜DSML｜ parameter name=\"anything\" "
                               "string=\"false\">[1, {\"a\": null}]</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));
  EXPECT_FALSE(grammar::matches(g,
                                "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_forecast\">\n<｜DSML｜ parameter name=\"anything\" "
                                "string=\"false\">1</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));
  // Free, but still never the text that would end the value early, raw or inside JSON.
  for (const char* value : {"string=\"false\">[\"</｜DSML｜\"]", "string=\"true\">a</｜DSML｜b"})
    EXPECT_FALSE(grammar::matches(g, std::string("<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_time\">\n<｜DSML｜ parameter ") +
                                         "name=\"x\" " + value + "</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"))
        << value;
  const SentenceSampler sampler(g);
  // Any JSON object, numbers of any size included (JSON has no range; nlohmann refuses a number
  // past a double's, such as the sampler's -2.5690e196050286): the JSON grammar itself, which
  // the JSON-Schema-Test-Suite checks.
  const Grammar any_object = grammar::compile_json_schema(Json::parse(R"({"type": "object"})"), {});
  std::mt19937 rng(5);
  for (int n = 0; n < 200; ++n) {
    const std::string text = sampler.sample(rng, 80);
    const ParsedAnswer answer = parse(text, false, rng);
    for (std::size_t k = 0; k < answer.names.size(); ++k) {
      if (answer.names[k] == "get_forecast") EXPECT_EQ(forecast_problem(answer.arguments[k]), "") << text;
      else EXPECT_TRUE(grammar::matches(any_object, answer.arguments[k])) << answer.arguments[k];
    }
  }
}

// auto beside a response_format: the answer is the schema's JSON (whose strings cannot open a
// DSML block) or a calls block.
TEST(ToolCallGrammar, UnderAutoAResponseFormatConstrainsTheOtherAnswer) {
  ConstraintSpec answer;
  answer.kind = ConstraintSpec::Kind::JsonSchema;
  answer.schema = Json::parse(R"({"type": "object", "properties": {"ok": {"type": "string"}}, "required": ["ok"]})");
  answer.field = "response_format.json_schema.schema";
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::ToolCalls;
  spec.field = "tools";
  spec.tool_calls = std::make_shared<ToolCallSpec>(spec_of(ToolCallSpec::Mode::Optional, PromptFormat::V41));
  spec.answer = std::make_shared<ConstraintSpec>(answer);
  const Grammar g = constraint_grammar(spec);
  EXPECT_TRUE(grammar::matches(g, R"({"ok": "yes"})"));
  EXPECT_FALSE(grammar::matches(g, R"({"ok": "<｜DSML｜"})"));
  EXPECT_FALSE(grammar::matches(g, "Free text"));
  EXPECT_TRUE(grammar::matches(g,
                               "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_time\">\n<｜DSML｜ parameter name=\"zone\" "
                               "string=\"true\">UTC</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));
}

// A tool's schema that cannot be enforced is a 400 naming the tool's field and the place in it.
TEST(ToolCallGrammar, SchemasThatCannotBeEnforcedAreRefusedWithTheirField) {
  const auto refusal = [](const Json& schema, bool strict) -> std::pair<std::string, std::string> {
    ToolCallSpec spec;
    spec.tools.push_back({"f", schema, strict, true, "tools.3.function.parameters"});
    try {
      tool_call_grammar(spec, nullptr);
    } catch (const ApiError& error) {
      EXPECT_EQ(error.status(), 400);
      return {error.what(), error.param()};
    }
    return {"", ""};
  };
  const auto [unique, unique_param] =
      refusal(Json::parse(R"({"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": true}}})"), true);
  EXPECT_EQ(unique_param, "tools.3.function.parameters");
  EXPECT_NE(unique.find("tools.3.function.parameters/properties/xs/uniqueItems"), std::string::npos) << unique;
  const auto [any_of, any_of_param] = refusal(Json::parse(R"({"anyOf": [{"type": "object"}]})"), true);
  EXPECT_NE(any_of.find("tools.3.function.parameters/anyOf"), std::string::npos) << any_of;
  const auto [missing, missing_param] =
      refusal(Json::parse(R"({"type": "object", "properties": {}, "required": ["x"]})"), true);
  EXPECT_NE(missing.find("'x' is required"), std::string::npos) << missing;
  // Each long string compiles, but together they pass the limit on the whole block.
  const auto [large, large_param] = refusal(
      Json::parse(R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 10000},
                                                       "b": {"type": "string", "maxLength": 10000}}})"),
      true);
  EXPECT_NE(large.find("more than the limit"), std::string::npos) << large;
  // Not strict: an undeclared required key takes any value.
  EXPECT_EQ(refusal(Json::parse(R"({"type": "object", "required": ["x"]})"), false).first, "");
}

TEST(ToolCallGrammar, AToolWithoutParametersIsCalledWithNone) {
  ToolCallSpec spec;
  spec.tools.push_back({"ping", nullptr, true, true, "tools.0.function.parameters"});
  const Grammar g = tool_call_grammar(spec, nullptr);
  const std::string text = "<｜DSML｜ invoke name=\"ping\">\n\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  ASSERT_TRUE(grammar::matches(g, text));
  std::mt19937 rng(1);
  const ParsedAnswer answer = parse(text, true, rng);
  ASSERT_EQ(answer.names.size(), 1u);
  EXPECT_EQ(answer.arguments[0], "{}");
}

}  // namespace
}  // namespace deepinfer::api

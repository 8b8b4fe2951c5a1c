#pragma once
// The protocol-neutral request that every adapter (Chat Completions, Anthropic Messages, Responses)
// produces and the prompt renderer consumes (docs/recipe.md §1.2 step 1).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::api {

// Which checkpoint's prompt format to render (recipe §1.9).
enum class PromptFormat { V4, V41 };

enum class Role { System, User, Assistant, Tool, LatestReminder };

// Text, or one image whose pixels are not read here (the prompt shows a placeholder token).
struct ContentPart {
  enum class Kind { Text, Image };
  Kind kind = Kind::Text;
  std::string text;  // Text: the text; Image: the URL or data URL
};
using Content = std::vector<ContentPart>;

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text as the client sent it; need not be valid JSON
};

struct Message {
  Role role = Role::User;
  Content content;
  std::optional<std::string> reasoning_content;  // assistant only
  std::vector<ToolCall> tool_calls;              // assistant only
  std::string tool_call_id;                      // tool only
  bool prefix = false;  // assistant only, last message: the model continues this turn
};

struct ToolDefinition {
  std::string name;
  std::string description;
  // Order-preserving so the schema reaches the prompt with the client's key order; null = none.
  nlohmann::ordered_json parameters;
  // OpenAI's function.strict / Anthropic's strict: the arguments follow the schema's strict
  // reading (no keys it does not declare), and a tool call under tool_choice auto is
  // constrained to it.
  bool strict = false;
  // Where the schema is in the request ("tools.0.function.parameters"), for 400s about it.
  std::string schema_field;
};

// A named tool choice is expressed as Required with only that tool left in `tools`.
enum class ToolChoice { Auto, None, Required };
enum class ReasoningEffort { Low, High, XHigh, Max };
enum class ResponseFormat { Text, JsonObject };

struct Conversation {
  std::vector<Message> messages;
  std::vector<ToolDefinition> tools;
  ToolChoice tool_choice = ToolChoice::Auto;
  // Required came from a tool_choice naming a function: the answer is exactly one call of it.
  bool tool_choice_named = false;
  // OpenAI's parallel_tool_calls (Anthropic's !disable_parallel_tool_use): false allows one call
  // per answer, which a constrained tool call enforces.
  bool parallel_tool_calls = true;
  bool thinking = true;
  std::optional<ReasoningEffort> reasoning_effort;  // none: the default (high)
  ResponseFormat response_format = ResponseFormat::Text;
};

Content text_content(std::string text);
// The text parts joined, images left out: what checks on the words of a message look at.
std::string plain_text(const Content& content);

}  // namespace deepinfer::api

#include "api/request_fields.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <sstream>

#include "api/api_error.h"
#include "api/prompt_markers.h"
#include "core/error.h"

namespace deepinfer::api::fields {

const Json* find(const Json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  const auto found = object.find(key);
  if (found == object.end() || found->is_null()) return nullptr;
  return &*found;
}

const Json& require(const Json& object, std::string_view key, const std::string& where) {
  const Json* value = find(object, key);
  if (value == nullptr) reject(str_cat(where, key, ": field required"), str_cat(where, key));
  return *value;
}

const Json& object(const Json& value, const std::string& where) {
  if (!value.is_object()) reject(where + ": expected an object", where);
  return value;
}

const Json& array(const Json& value, const std::string& where) {
  if (!value.is_array()) reject(where + ": expected an array", where);
  return value;
}

const std::string& string(const Json& value, const std::string& where) {
  if (!value.is_string()) reject(where + ": expected a string", where);
  return value.get_ref<const std::string&>();
}

double number(const Json& value, const std::string& where) {
  if (!value.is_number()) reject(where + ": expected a number", where);
  return value.get<double>();
}

int64_t integer(const Json& value, const std::string& where) {
  if (value.is_number_unsigned()) {
    const auto unsigned_value = value.get<uint64_t>();
    if (unsigned_value > static_cast<uint64_t>(INT64_MAX)) reject(where + ": integer out of range", where);
    return static_cast<int64_t>(unsigned_value);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  // 512.0 is accepted as 512 like Python's JSON-to-int validators do; 0.5 is not an integer.
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
  }
  reject(where + ": expected an integer", where);
}

bool boolean(const Json& value, const std::string& where) {
  if (!value.is_boolean()) reject(where + ": expected a boolean", where);
  return value.get<bool>();
}

std::optional<double> optional_number(const Json& body, std::string_view key) {
  const Json* value = find(body, key);
  if (value == nullptr) return std::nullopt;
  return number(*value, std::string(key));
}

std::optional<int64_t> optional_integer(const Json& body, std::string_view key) {
  const Json* value = find(body, key);
  if (value == nullptr) return std::nullopt;
  return integer(*value, std::string(key));
}

std::optional<bool> optional_bool(const Json& body, std::string_view key) {
  const Json* value = find(body, key);
  if (value == nullptr) return std::nullopt;
  return boolean(*value, std::string(key));
}

namespace {
std::string shortest(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}
}  // namespace

void check_range(double value, double lo, double hi, std::string_view name) {
  if (!(value >= lo && value <= hi)) {
    reject(str_cat(name, " must be in [", shortest(lo), ", ", shortest(hi), "]"), std::string(name));
  }
}

void check_max_tokens(int64_t value) {
  if (value <= 0) reject("max_tokens must be greater than zero", "max_tokens");
}

void check_tool_name(const std::string& name, const std::string& where) {
  const bool valid = !name.empty() && name.size() <= 128 &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
                     });
  if (!valid) reject(where + ": expected 1-128 ASCII letters, digits, underscores or hyphens", where);
}

namespace {
// Stops descending once the limit is passed, so its own recursion is bounded too.
bool nests_deeper_than(const Json& value, int limit) {
  if (!value.is_structured()) return false;
  if (limit == 0) return true;
  for (const Json& item : value) {
    if (nests_deeper_than(item, limit - 1)) return true;
  }
  return false;
}
}  // namespace

void check_nesting(const Json& value, const std::string& where) {
  if (nests_deeper_than(value, kMaxJsonNesting)) {
    reject(str_cat(where, ": nested deeper than ", kMaxJsonNesting, " levels"), where);
  }
}

void check_parameters_schema(const Json& schema, const std::string& where) {
  check_nesting(schema, where);
  const Json* type = find(schema, "type");
  if (!schema.is_object() || (type != nullptr && *type != "object")) {
    reject(where + " must be a JSON Schema of type object", where);
  }
}

void read_temperature_and_top_p(const Json& body, engine::SamplingParams& sampling) {
  if (const std::optional<double> t = optional_number(body, "temperature")) {
    check_range(*t, 0, 2, "temperature");
    sampling.temperature = static_cast<float>(*t);
  }
  if (const std::optional<double> p = optional_number(body, "top_p")) {
    check_range(*p, 0, 1, "top_p");
    if (*p == 0) sampling.temperature = 0.0f;
    sampling.top_p = *p == 0 ? 1.0f : static_cast<float>(*p);
  }
}

std::optional<ToolChoice> tool_choice_mode(std::string_view mode) {
  if (mode == "none") return ToolChoice::None;
  if (mode == "auto") return ToolChoice::Auto;
  if (mode == "required") return ToolChoice::Required;
  return std::nullopt;
}

}  // namespace deepinfer::api::fields

namespace deepinfer::api {
namespace {

bool has_image_marker(std::string_view text) { return text.find(markers::kImage) != std::string_view::npos; }

void check_image_marker(const Conversation& conversation) {
  bool found = false;
  for (const Message& message : conversation.messages) {
    for (const ContentPart& part : message.content) {
      found = found || (part.kind == ContentPart::Kind::Text && has_image_marker(part.text));
    }
    found = found || has_image_marker(message.reasoning_content.value_or(""));
    for (const ToolCall& call : message.tool_calls) {
      found = found || has_image_marker(call.name) || has_image_marker(call.arguments);
    }
  }
  for (const ToolDefinition& tool : conversation.tools) {
    found = found || has_image_marker(tool.description) ||
            (!tool.parameters.is_null() &&
             has_image_marker(tool.parameters.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)));
  }
  if (found) {
    reject("The sub-string \"<｜image｜>\" in your input is not allowed for this API. Please remove "
           "\"<｜image｜>\" from your input and try again.");
  }
}

void check_unique_tool_names(const std::vector<ToolDefinition>& tools) {
  std::set<std::string> names;
  for (const ToolDefinition& tool : tools) {
    if (!names.insert(tool.name).second) reject("Tool names must be unique", "tools");
  }
}

bool contains_word_json(const Conversation& conversation) {
  for (const Message& message : conversation.messages) {
    std::string text = plain_text(message.content);
    std::transform(text.begin(), text.end(), text.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (text.find("json") != std::string::npos) return true;
  }
  return false;
}

// The bracket depth of JSON text, strings skipped; the text need not be valid JSON.
int bracket_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

void validate_conversation(const Conversation& conversation) {
  const std::vector<Message>& messages = conversation.messages;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    for (const ToolCall& call : messages[i].tool_calls) {
      if (bracket_depth(call.arguments) > fields::kMaxJsonNesting) {
        const std::string param = str_cat("messages[", i, "].tool_calls");
        reject(str_cat(param, ": arguments nested deeper than ", fields::kMaxJsonNesting, " levels"), param);
      }
    }
  }
  check_image_marker(conversation);
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].prefix) continue;
    const std::string param = str_cat("messages[", i, "].prefix");
    if (messages[i].role != Role::Assistant || i + 1 != messages.size()) {
      reject("prefix: only the last message, from the assistant, can be a prefix to continue", param);
    }
    if (!messages[i].tool_calls.empty()) reject("prefix: a prefix message cannot have tool_calls", param);
    if (conversation.tool_choice == ToolChoice::Required) {
      reject("prefix: a prefix message cannot be combined with a required or named tool_choice", param);
    }
  }
  check_unique_tool_names(conversation.tools);
  if (conversation.thinking && conversation.tool_choice == ToolChoice::Required) {
    reject("Thinking mode does not support this tool_choice", "tool_choice");
  }
  if (conversation.response_format == ResponseFormat::JsonObject && !contains_word_json(conversation)) {
    reject("Prompt must contain the word 'json' in some form to use 'response_format' of type "
           "'json_object'.",
           "response_format");
  }
}

void choose_named_tool(Conversation& conversation, const std::string& name) {
  check_unique_tool_names(conversation.tools);
  std::vector<ToolDefinition> chosen;
  for (ToolDefinition& tool : conversation.tools) {
    if (tool.name == name) chosen.push_back(std::move(tool));
  }
  if (chosen.empty()) reject("tool_choice: no tool named '" + name + "' was specified", "tool_choice");
  conversation.tools = std::move(chosen);
  conversation.tool_choice = ToolChoice::Required;
  conversation.tool_choice_named = true;
}

}  // namespace deepinfer::api

// POST /messages (Anthropic Messages) body -> ApiRequest (recipe §3.3).
#include "api/api_error.h"
#include "api/prompt_json.h"
#include "api/request.h"
#include "api/request_constraint.h"
#include "api/request_fields.h"
#include "core/error.h"

namespace deepinfer::api {
namespace {

using fields::Json;

constexpr std::size_t kMaxStopSequences = 16;

std::string join_blocks_text(const Json& value, const std::string& where) {
  if (value.is_string()) return value.get<std::string>();
  const Json& blocks = fields::array(value, where);
  std::string text;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const std::string block_where = str_cat(where, "[", j, "]");
    const Json& block = fields::object(blocks[j], block_where);
    const std::string& type = fields::string(fields::require(block, "type", block_where + "."), block_where + ".type");
    if (type != "text") reject(str_cat(block_where, ": expected a text block, got '", type, "'"), block_where);
    if (j > 0) text += "\n\n";
    text += fields::string(fields::require(block, "text", block_where + "."), block_where + ".text");
  }
  return text;
}

ContentPart image_part(const Json& block, const std::string& where) {
  const Json& source = fields::object(fields::require(block, "source", where + "."), where + ".source");
  const std::string& type = fields::string(fields::require(source, "type", where + ".source."), where + ".source.type");
  if (type == "url") {
    return ContentPart{ContentPart::Kind::Image, fields::string(fields::require(source, "url", where + ".source."), where + ".source.url")};
  }
  if (type == "base64") {
    const std::string& media = fields::string(fields::require(source, "media_type", where + ".source."), where + ".source.media_type");
    const std::string& data = fields::string(fields::require(source, "data", where + ".source."), where + ".source.data");
    return ContentPart{ContentPart::Kind::Image, "data:" + media + ";base64," + data};
  }
  reject(str_cat(where, ".source.type: unsupported image source '", type, "'"), where + ".source.type");
}

// tool_result content: a string, or text and image blocks joined with "\n\n".
Content tool_result_content(const Json& block, const std::string& where) {
  const Json* value = fields::find(block, "content");
  if (value == nullptr) return {};
  if (value->is_string()) return text_content(value->get<std::string>());
  const Json& blocks = fields::array(*value, where + ".content");
  Content content;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const std::string block_where = str_cat(where, ".content[", j, "]");
    const Json& inner = fields::object(blocks[j], block_where);
    const std::string& type = fields::string(fields::require(inner, "type", block_where + "."), block_where + ".type");
    if (j > 0) content.push_back(ContentPart{ContentPart::Kind::Text, "\n\n"});
    if (type == "text") {
      content.push_back(ContentPart{ContentPart::Kind::Text,
                                    fields::string(fields::require(inner, "text", block_where + "."), block_where + ".text")});
    } else if (type == "image") {
      content.push_back(image_part(inner, block_where));
    } else {
      reject(str_cat(block_where, ": unsupported content type '", type, "'"), block_where);
    }
  }
  return content;
}

// A user turn: each block becomes its own message (text, image, document -> User; tool_result ->
// Tool); the renderer joins neighbours with "\n\n".
void add_user_turn(const Json& value, const std::string& where, std::vector<Message>& out) {
  if (value.is_string()) {
    out.push_back(Message{Role::User, text_content(value.get<std::string>()), {}, {}, {}, false});
    return;
  }
  const Json& blocks = fields::array(value, where);
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const std::string block_where = str_cat(where, "[", j, "]");
    const Json& block = fields::object(blocks[j], block_where);
    const std::string& type = fields::string(fields::require(block, "type", block_where + "."), block_where + ".type");
    Message message;
    message.role = Role::User;
    if (type == "text") {
      message.content = text_content(fields::string(fields::require(block, "text", block_where + "."), block_where + ".text"));
    } else if (type == "image") {
      message.content.push_back(image_part(block, block_where));
    } else if (type == "document") {
      message.content = text_content("[Unsupported Document]");
    } else if (type == "tool_result") {
      message.role = Role::Tool;
      message.tool_call_id = fields::string(fields::require(block, "tool_use_id", block_where + "."), block_where + ".tool_use_id");
      message.content = tool_result_content(block, block_where);
    } else {
      reject(str_cat(block_where, ": unsupported content type '", type, "' in a user message"), block_where);
    }
    out.push_back(std::move(message));
  }
}

Message assistant_turn(const Json& value, const std::string& where) {
  Message message;
  message.role = Role::Assistant;
  if (value.is_string()) {
    message.content = text_content(value.get<std::string>());
    return message;
  }
  const Json& blocks = fields::array(value, where);
  std::string text;
  bool has_text = false;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const std::string block_where = str_cat(where, "[", j, "]");
    const Json& block = fields::object(blocks[j], block_where);
    const std::string& type = fields::string(fields::require(block, "type", block_where + "."), block_where + ".type");
    if (type == "text") {
      if (has_text) text += "\n\n";
      has_text = true;
      text += fields::string(fields::require(block, "text", block_where + "."), block_where + ".text");
    } else if (type == "thinking") {
      const std::string& thought = fields::string(fields::require(block, "thinking", block_where + "."), block_where + ".thinking");
      message.reasoning_content = message.reasoning_content ? *message.reasoning_content + "\n\n" + thought : thought;
    } else if (type == "redacted_thinking") {
      // Opaque to us: nothing of it can be shown to the model.
    } else if (type == "tool_use") {
      ToolCall call;
      call.id = fields::string(fields::require(block, "id", block_where + "."), block_where + ".id");
      call.name = fields::string(fields::require(block, "name", block_where + "."), block_where + ".name");
      const Json* input = fields::find(block, "input");
      if (input != nullptr) fields::check_nesting(*input, block_where + ".input");
      call.arguments = input == nullptr ? "{}" : python_json(*input);
      message.tool_calls.push_back(std::move(call));
    } else {
      reject(str_cat(block_where, ": unsupported content type '", type, "' in an assistant message"), block_where);
    }
  }
  if (has_text) message.content = text_content(std::move(text));
  return message;
}

ToolDefinition parse_tool(const Json& value, std::size_t index) {
  const std::string where = str_cat("tools.", index);
  const Json& tool = fields::object(value, where);
  if (const Json* type = fields::find(tool, "type"); type != nullptr && *type != "custom") {
    reject(where + ": server tools are not supported", where);
  }
  ToolDefinition definition;
  definition.name = fields::string(fields::require(tool, "name", where + "."), where + ".name");
  fields::check_tool_name(definition.name, where + ".name");
  if (const Json* description = fields::find(tool, "description")) {
    definition.description = fields::string(*description, where + ".description");
  }
  const Json& schema = fields::require(tool, "input_schema", where + ".");
  fields::check_parameters_schema(schema, where + ".input_schema");
  definition.parameters = schema;
  definition.schema_field = where + ".input_schema";
  definition.strict = fields::optional_bool(tool, "strict").value_or(false);
  return definition;
}

}  // namespace

ApiRequest parse_messages_request(const nlohmann::ordered_json& body) {
  fields::object(body, "body");
  ApiRequest request;
  Conversation& conversation = request.conversation;
  GenerationOptions& options = request.options;
  options.model = fields::string(fields::require(body, "model", ""), "model");
  const int64_t max_tokens = fields::integer(fields::require(body, "max_tokens", ""), "max_tokens");
  fields::check_max_tokens(max_tokens);
  options.max_tokens = max_tokens;
  const Json& messages = fields::array(fields::require(body, "messages", ""), "messages");
  if (messages.empty()) reject("messages: at least one message is required", "messages");

  std::optional<bool> thinking;
  if (const Json* value = fields::find(body, "thinking")) {
    const std::string& type = fields::string(
        fields::require(fields::object(*value, "thinking"), "type", "thinking."), "thinking.type");
    if (type == "enabled" || type == "adaptive") {
      thinking = true;
    } else if (type == "disabled") {
      thinking = false;
    } else {
      reject("thinking.type: expected 'enabled', 'adaptive' or 'disabled'", "thinking.type");
    }
  }
  if (const Json* config = fields::find(body, "output_config")) {
    if (const Json* format = fields::find(fields::object(*config, "output_config"), "format"))
      read_anthropic_format(*format, "output_config.format", options.constraint);
    if (const Json* effort = fields::find(fields::object(*config, "output_config"), "effort")) {
      const std::string& level = fields::string(*effort, "output_config.effort");
      if (level == "low") {
        conversation.reasoning_effort = ReasoningEffort::Low;
      } else if (level == "medium" || level == "high") {
        conversation.reasoning_effort = ReasoningEffort::High;
      } else if (level == "xhigh") {
        conversation.reasoning_effort = ReasoningEffort::XHigh;
      } else if (level == "max") {
        conversation.reasoning_effort = ReasoningEffort::Max;
      } else {
        reject("output_config.effort: expected one of low, medium, high, xhigh, max", "output_config.effort");
      }
    }
  }
  conversation.thinking = thinking.value_or(true);
  // The structured-outputs beta's name for output_config.format, still accepted by Anthropic.
  if (const Json* format = fields::find(body, "output_format")) read_anthropic_format(*format, "output_format", options.constraint);

  if (const Json* system = fields::find(body, "system")) {
    std::string text = join_blocks_text(*system, "system");
    if (!text.empty()) conversation.messages.push_back(Message{Role::System, text_content(std::move(text)), {}, {}, {}, false});
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string where = str_cat("messages[", i, "]");
    const Json& message = fields::object(messages[i], where);
    const std::string& role = fields::string(fields::require(message, "role", where + "."), where + ".role");
    const Json& content = fields::require(message, "content", where + ".");
    if (role == "user") {
      add_user_turn(content, where + ".content", conversation.messages);
    } else if (role == "assistant") {
      conversation.messages.push_back(assistant_turn(content, where + ".content"));
    } else {
      reject(str_cat(where, ".role: expected 'user' or 'assistant', got '", role, "'"), where + ".role");
    }
  }

  if (const Json* tools = fields::find(body, "tools")) {
    const Json& list = fields::array(*tools, "tools");
    for (std::size_t i = 0; i < list.size(); ++i) conversation.tools.push_back(parse_tool(list[i], i));
  }
  if (const Json* choice = fields::find(body, "tool_choice")) {
    const Json& object = fields::object(*choice, "tool_choice");
    const std::string& type = fields::string(fields::require(object, "type", "tool_choice."), "tool_choice.type");
    conversation.parallel_tool_calls = !fields::optional_bool(object, "disable_parallel_tool_use").value_or(false);
    // As Chat Completions' string modes and named function: "any" is "required" (a tool call is
    // forced), "tool" keeps only the named tool and forces it; thinking mode refuses both
    // (validate_conversation), as it refuses them on Chat Completions.
    if (type == "auto") {
      conversation.tool_choice = ToolChoice::Auto;
    } else if (type == "any") {
      conversation.tool_choice = ToolChoice::Required;
    } else if (type == "none") {
      conversation.tool_choice = ToolChoice::None;
    } else if (type == "tool") {
      choose_named_tool(conversation, fields::string(fields::require(object, "name", "tool_choice."), "tool_choice.name"));
    } else {
      reject("tool_choice.type: expected 'auto', 'any', 'tool' or 'none'", "tool_choice.type");
    }
  }

  if (const Json* stop = fields::find(body, "stop_sequences")) {
    const Json& list = fields::array(*stop, "stop_sequences");
    if (list.size() > kMaxStopSequences) reject("stop_sequences: at most 16 stop sequences are allowed", "stop_sequences");
    for (std::size_t k = 0; k < list.size(); ++k) {
      const std::string& sequence = fields::string(list[k], str_cat("stop_sequences[", k, "]"));
      if (sequence.empty()) reject("stop_sequences: stop sequences must not be empty", "stop_sequences");
      options.stop.push_back(sequence);
    }
  }
  options.stream = fields::optional_bool(body, "stream").value_or(false);
  options.ignore_eos = fields::optional_bool(body, "ignore_eos").value_or(false);
  fields::read_temperature_and_top_p(body, options.sampling);
  if (const std::optional<int64_t> k = fields::optional_integer(body, "top_k")) {
    if (*k < 0 || *k > INT32_MAX) reject("top_k must be a non-negative integer", "top_k");
    options.sampling.top_k = static_cast<int32_t>(*k);
  }

  validate_conversation(conversation);
  return request;
}

}  // namespace deepinfer::api

// POST /responses (OpenAI Responses) body -> ApiRequest (recipe §3.2).
#include "api/api_error.h"
#include "api/request.h"
#include "api/request_constraint.h"
#include "api/request_fields.h"
#include "core/error.h"

namespace deepinfer::api {
namespace {

using fields::Json;

// The single string parameter Codex-style apply_patch takes (recipe §3.2).
const Json& apply_patch_parameters() {
  static const Json parameters = Json::parse(
      R"({"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]})");
  return parameters;
}

Content message_content(const Json& value, const std::string& where) {
  if (value.is_string()) return text_content(value.get<std::string>());
  const Json& blocks = fields::array(value, where);
  Content content;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const std::string block_where = str_cat(where, "[", j, "]");
    const Json& block = fields::object(blocks[j], block_where);
    const std::string& type = fields::string(fields::require(block, "type", block_where + "."), block_where + ".type");
    if (j > 0) content.push_back(ContentPart{ContentPart::Kind::Text, "\n\n"});
    if (type == "input_text" || type == "output_text" || type == "text") {
      content.push_back(ContentPart{ContentPart::Kind::Text,
                                    fields::string(fields::require(block, "text", block_where + "."), block_where + ".text")});
    } else if (type == "input_image") {
      content.push_back(ContentPart{ContentPart::Kind::Image,
                                    fields::string(fields::require(block, "image_url", block_where + "."), block_where + ".image_url")});
    } else {
      reject(str_cat(block_where, ": unsupported content type '", type, "'"), block_where);
    }
  }
  return content;
}

Role message_role(const std::string& role, const std::string& where) {
  if (role == "user") return Role::User;
  if (role == "assistant") return Role::Assistant;
  if (role == "system" || role == "developer") return Role::System;
  reject(str_cat(where, ".role: unknown role '", role, "'"), where + ".role");
}

// An assistant message to hang a function call on: the previous one when it is an assistant turn.
Message& assistant_for_call(std::vector<Message>& messages) {
  if (messages.empty() || messages.back().role != Role::Assistant) {
    messages.push_back(Message{Role::Assistant, {}, {}, {}, {}, false});
  }
  return messages.back();
}

void add_input_items(const Json& input, std::vector<Message>& messages) {
  if (input.is_string()) {
    messages.push_back(Message{Role::User, text_content(input.get<std::string>()), {}, {}, {}, false});
    return;
  }
  const Json& items = fields::array(input, "input");
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string where = str_cat("input[", i, "]");
    const Json& item = fields::object(items[i], where);
    const Json* type_value = fields::find(item, "type");
    const std::string type = type_value == nullptr ? "message" : fields::string(*type_value, where + ".type");
    if (type == "message") {
      Message message;
      message.role = message_role(fields::string(fields::require(item, "role", where + "."), where + ".role"), where);
      message.content = message_content(fields::require(item, "content", where + "."), where + ".content");
      messages.push_back(std::move(message));
    } else if (type == "function_call") {
      ToolCall call;
      call.id = fields::string(fields::require(item, "call_id", where + "."), where + ".call_id");
      call.name = fields::string(fields::require(item, "name", where + "."), where + ".name");
      if (const Json* ns = fields::find(item, "namespace")) call.name = fields::string(*ns, where + ".namespace") + "::" + call.name;
      const Json* arguments = fields::find(item, "arguments");
      call.arguments = arguments == nullptr ? "{}" : fields::string(*arguments, where + ".arguments");
      assistant_for_call(messages).tool_calls.push_back(std::move(call));
    } else if (type == "function_call_output") {
      Message result;
      result.role = Role::Tool;
      result.tool_call_id = fields::string(fields::require(item, "call_id", where + "."), where + ".call_id");
      const Json& output = fields::require(item, "output", where + ".");
      result.content = message_content(output, where + ".output");
      messages.push_back(std::move(result));
    } else if (type == "reasoning") {
      // Earlier reasoning items carry encrypted or summarised text; deepseek-recipe drops them.
    } else {
      reject(str_cat(where, ".type: unsupported input item type '", type, "'"), where + ".type");
    }
  }
}

ToolDefinition function_tool(const Json& tool, const std::string& where, const std::string& prefix,
                             const std::string& namespace_description) {
  ToolDefinition definition;
  const std::string& name = fields::string(fields::require(tool, "name", where + "."), where + ".name");
  fields::check_tool_name(name, where + ".name");
  definition.name = prefix + name;
  std::string description;
  if (const Json* value = fields::find(tool, "description")) description = fields::string(*value, where + ".description");
  definition.description = namespace_description.empty() ? description : namespace_description + "\n" + description;
  if (const Json* parameters = fields::find(tool, "parameters")) {
    fields::check_parameters_schema(*parameters, where + ".parameters");
    definition.parameters = *parameters;
  }
  definition.schema_field = where + ".parameters";
  // Absent is not strict here (OpenAI's Responses default is strict): constraints stay opt-in.
  definition.strict = fields::optional_bool(tool, "strict").value_or(false);
  return definition;
}

void add_tools(const Json& list, std::vector<ToolDefinition>& tools) {
  fields::array(list, "tools");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string where = str_cat("tools[", i, "]");
    const Json& tool = fields::object(list[i], where);
    const std::string& type = fields::string(fields::require(tool, "type", where + "."), where + ".type");
    if (type == "function") {
      tools.push_back(function_tool(tool, where, "", ""));
    } else if (type == "namespace") {
      const std::string& ns = fields::string(fields::require(tool, "name", where + "."), where + ".name");
      fields::check_tool_name(ns, where + ".name");
      std::string description;
      if (const Json* value = fields::find(tool, "description")) description = fields::string(*value, where + ".description");
      const Json& inner = fields::array(fields::require(tool, "tools", where + "."), where + ".tools");
      for (std::size_t k = 0; k < inner.size(); ++k) {
        const std::string inner_where = str_cat(where, ".tools[", k, "]");
        const Json& member = fields::object(inner[k], inner_where);
        const Json* member_type = fields::find(member, "type");
        if (member_type != nullptr && *member_type == "custom") {
          reject(inner_where + ": custom tools are not supported inside a namespace", inner_where);
        }
        if (member_type != nullptr && *member_type != "function") {
          reject(inner_where + ": only function tools are supported inside a namespace", inner_where);
        }
        tools.push_back(function_tool(member, inner_where, ns + "::", description));
      }
    } else if (type == "custom") {
      const std::string& name = fields::string(fields::require(tool, "name", where + "."), where + ".name");
      if (name != "apply_patch") reject("Unsupported custom tool: '" + name + "'. Only 'apply_patch' is supported", where);
      ToolDefinition definition;
      definition.name = name;
      if (const Json* value = fields::find(tool, "description")) definition.description = fields::string(*value, where + ".description");
      definition.parameters = apply_patch_parameters();
      definition.schema_field = where;
      tools.push_back(std::move(definition));
    } else if (type.rfind("web_search", 0) == 0) {
      // Ignored: the model has no search backend here (recipe §3.2 default).
    } else {
      reject(str_cat(where, ".type: unsupported tool type '", type, "'"), where + ".type");
    }
  }
}

}  // namespace

ApiRequest parse_responses_request(const nlohmann::ordered_json& body) {
  fields::object(body, "body");
  ApiRequest request;
  Conversation& conversation = request.conversation;
  GenerationOptions& options = request.options;
  options.model = fields::string(fields::require(body, "model", ""), "model");

  // A top-level `thinking` is not part of this API and is ignored; reasoning.effort decides.
  if (const Json* reasoning = fields::find(body, "reasoning")) {
    if (const Json* effort = fields::find(fields::object(*reasoning, "reasoning"), "effort")) {
      const std::string& level = fields::string(*effort, "reasoning.effort");
      if (level == "none") {
        conversation.thinking = false;
      } else if (level == "minimal" || level == "low") {
        conversation.reasoning_effort = ReasoningEffort::Low;
      } else if (level == "medium" || level == "high") {
        conversation.reasoning_effort = ReasoningEffort::High;
      } else if (level == "xhigh") {
        conversation.reasoning_effort = ReasoningEffort::XHigh;
      } else if (level == "max") {
        conversation.reasoning_effort = ReasoningEffort::Max;
      } else {
        reject("reasoning.effort: expected one of none, minimal, low, medium, high, xhigh, max", "reasoning.effort");
      }
    }
  }

  if (const Json* instructions = fields::find(body, "instructions")) {
    const std::string& text = fields::string(*instructions, "instructions");
    if (!text.empty()) conversation.messages.push_back(Message{Role::System, text_content(text), {}, {}, {}, false});
  }
  add_input_items(fields::require(body, "input", ""), conversation.messages);
  if (conversation.messages.empty()) reject("input: at least one input item is required", "input");

  if (const Json* tools = fields::find(body, "tools")) add_tools(*tools, conversation.tools);
  conversation.parallel_tool_calls = fields::optional_bool(body, "parallel_tool_calls").value_or(true);
  if (const Json* choice = fields::find(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::optional<ToolChoice> mode = fields::tool_choice_mode(choice->get_ref<const std::string&>());
      if (!mode) reject("tool_choice: expected 'none', 'auto', 'required' or a named tool", "tool_choice");
      conversation.tool_choice = *mode;
    } else {
      const Json& named = fields::object(*choice, "tool_choice");
      choose_named_tool(conversation, fields::string(fields::require(named, "name", "tool_choice."), "tool_choice.name"));
    }
  }

  if (const Json* text = fields::find(body, "text")) {
    if (const Json* format = fields::find(fields::object(*text, "text"), "format")) {
      if (read_responses_format(*format, options.constraint)) conversation.response_format = ResponseFormat::JsonObject;
    }
  }
  options.stream = fields::optional_bool(body, "stream").value_or(false);
  if (const std::optional<int64_t> max_tokens = fields::optional_integer(body, "max_output_tokens")) {
    if (*max_tokens <= 0) reject("max_output_tokens must be greater than zero", "max_output_tokens");
    options.max_tokens = max_tokens;
  }
  fields::read_temperature_and_top_p(body, options.sampling);

  validate_conversation(conversation);
  return request;
}

}  // namespace deepinfer::api

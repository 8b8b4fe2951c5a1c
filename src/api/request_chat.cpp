// POST /chat/completions body -> ApiRequest (recipe §3.1).
#include <set>

#include "api/api_error.h"
#include "api/request.h"
#include "api/request_constraint.h"
#include "api/request_fields.h"
#include "core/error.h"

namespace deepinfer::api {
namespace {

using fields::Json;

constexpr std::size_t kMaxStopSequences = 16;

void append_text(Content& content, std::string_view text) {
  if (!content.empty() && content.back().kind == ContentPart::Kind::Text) {
    content.back().text += text;
  } else {
    content.push_back(ContentPart{ContentPart::Kind::Text, std::string(text)});
  }
}

std::string image_url_of(const Json& block, const std::string& where) {
  const Json& image = fields::require(block, "image_url", where + ".");
  if (image.is_string()) return image.get<std::string>();
  return fields::string(fields::require(fields::object(image, where + ".image_url"), "url",
                                        where + ".image_url."),
                        where + ".image_url.url");
}

// A string, null, or content blocks joined with "\n\n"; each image becomes one image part.
Content parse_content(const Json& message, Role role, const std::string& where) {
  const Json* value = fields::find(message, "content");
  if (value == nullptr) return {};
  if (value->is_string()) return text_content(value->get<std::string>());
  const Json& blocks = fields::array(*value, where + ".content");
  Content content;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const std::string block_where = str_cat(where, ".content[", j, "]");
    const Json& block = fields::object(blocks[j], block_where);
    const std::string& type = fields::string(fields::require(block, "type", block_where + "."), block_where + ".type");
    if (j > 0) append_text(content, "\n\n");
    if (type == "text") {
      append_text(content, fields::string(fields::require(block, "text", block_where + "."), block_where + ".text"));
      continue;
    }
    const bool is_image = type == "image_url" || type == "file";
    if (!is_image) reject(str_cat(block_where, ": unsupported content type '", type, "'"), block_where);
    if (role == Role::System) reject("Image in system message is unsupported", where);
    if (role == Role::Assistant) reject("Image in assistant message is unsupported", where);
    if (role == Role::LatestReminder) reject(where + ".content: expected a string", where);
    if (type == "image_url") {
      content.push_back(ContentPart{ContentPart::Kind::Image, image_url_of(block, block_where)});
      continue;
    }
    const Json* file = fields::find(block, "file");
    const bool has_file_id = fields::find(block, "file_id") != nullptr ||
                             (file != nullptr && fields::find(*file, "file_id") != nullptr);
    if (has_file_id) {
      reject(block_where + ": file_id is not supported. Pass the image as a base64 data url instead.", block_where);
    }
    const Json* data = file != nullptr ? fields::find(*file, "file_data") : nullptr;
    if (data == nullptr) reject(block_where + ".file.file_data: field required", block_where);
    content.push_back(ContentPart{ContentPart::Kind::Image, fields::string(*data, block_where + ".file.file_data")});
  }
  return content;
}

Role parse_role(const std::string& role, const std::string& where) {
  if (role == "system" || role == "developer") return Role::System;
  if (role == "user") return Role::User;
  if (role == "assistant") return Role::Assistant;
  if (role == "tool") return Role::Tool;
  if (role == "latest_reminder") return Role::LatestReminder;
  reject(str_cat(where, ".role: unknown role '", role, "'"), where + ".role");
}

std::vector<ToolCall> parse_tool_calls(const Json& value, const std::string& where) {
  const Json& calls = fields::array(value, where);
  if (calls.empty()) reject(where + ": expected at least one tool call", where);
  std::vector<ToolCall> parsed;
  std::set<std::string> ids;
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const std::string call_where = str_cat(where, "[", k, "]");
    const Json& call = fields::object(calls[k], call_where);
    ToolCall tool_call;
    tool_call.id = fields::string(fields::require(call, "id", call_where + "."), call_where + ".id");
    if (!ids.insert(tool_call.id).second) reject(call_where + ".id: tool call ids must be unique", call_where);
    const Json& function = fields::object(fields::require(call, "function", call_where + "."), call_where + ".function");
    tool_call.name = fields::string(fields::require(function, "name", call_where + ".function."), call_where + ".function.name");
    const Json* arguments = fields::find(function, "arguments");
    tool_call.arguments = arguments == nullptr ? "{}" : fields::string(*arguments, call_where + ".function.arguments");
    parsed.push_back(std::move(tool_call));
  }
  return parsed;
}

Message parse_message(const Json& value, std::size_t index) {
  const std::string where = str_cat("messages[", index, "]");
  const Json& json = fields::object(value, where);
  Message message;
  message.role = parse_role(fields::string(fields::require(json, "role", where + "."), where + ".role"), where);
  if (message.role == Role::LatestReminder) {
    message.content = text_content(fields::string(fields::require(json, "content", where + "."), where + ".content"));
    return message;
  }
  message.content = parse_content(json, message.role, where);
  if (message.role == Role::Tool) {
    message.tool_call_id = fields::string(fields::require(json, "tool_call_id", where + "."), where + ".tool_call_id");
  }
  if (message.role == Role::Assistant) {
    if (const Json* reasoning = fields::find(json, "reasoning_content")) {
      message.reasoning_content = fields::string(*reasoning, where + ".reasoning_content");
    }
    if (const Json* calls = fields::find(json, "tool_calls")) {
      message.tool_calls = parse_tool_calls(*calls, where + ".tool_calls");
    }
    if (const Json* prefix = fields::find(json, "prefix")) {
      message.prefix = fields::boolean(*prefix, where + ".prefix");
    }
    // A prefix may be empty (continue from nothing); other turns need something to show.
    if (fields::find(json, "content") == nullptr && message.tool_calls.empty() && !message.prefix) {
      reject("Invalid assistant message: content or tool_calls must be set", where);
    }
  }
  return message;
}

// Each tool-calling assistant turn must be followed at once by one tool message per call id.
void check_tool_call_pairing(const std::vector<Message>& messages) {
  const std::string insufficient =
      "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
      "'tool_call_id'.";
  std::size_t i = 0;
  while (i < messages.size()) {
    if (messages[i].role == Role::Tool) {
      reject("Messages with role 'tool' must be a response to a preceding message with 'tool_calls'",
             str_cat("messages[", i, "].role"));
    }
    if (messages[i].role != Role::Assistant || messages[i].tool_calls.empty()) {
      ++i;
      continue;
    }
    std::set<std::string> pending;
    for (const ToolCall& call : messages[i].tool_calls) pending.insert(call.id);
    std::size_t j = i + 1;
    for (; j < messages.size() && messages[j].role == Role::Tool; ++j) {
      if (pending.erase(messages[j].tool_call_id) == 0) {
        reject(insufficient + " (tool_call_id '" + messages[j].tool_call_id +
                   "' does not answer a pending tool call)",
               str_cat("messages[", j, "].tool_call_id"));
      }
    }
    if (!pending.empty()) {
      reject(insufficient + " (insufficient tool messages following tool_calls message)",
             str_cat("messages[", i, "].tool_calls"));
    }
    i = j;
  }
}

ToolDefinition parse_tool(const Json& value, std::size_t index) {
  const std::string where = str_cat("tools.", index);
  const Json& tool = fields::object(value, where);
  const Json* type = fields::find(tool, "type");
  if (type != nullptr && *type != "function") reject(where + ".type: only function tools are supported", where + ".type");
  const Json& function = fields::object(fields::require(tool, "function", where + "."), where + ".function");
  ToolDefinition definition;
  definition.name = fields::string(fields::require(function, "name", where + ".function."), where + ".function.name");
  fields::check_tool_name(definition.name, where + ".function.name");
  if (const Json* description = fields::find(function, "description")) {
    definition.description = fields::string(*description, where + ".function.description");
  }
  if (const Json* parameters = fields::find(function, "parameters")) {
    fields::check_parameters_schema(*parameters, where + ".function.parameters");
    definition.parameters = *parameters;
  }
  definition.schema_field = where + ".function.parameters";
  definition.strict = fields::optional_bool(function, "strict").value_or(false);
  return definition;
}

void parse_thinking(const Json& body, Conversation& conversation) {
  std::optional<bool> thinking;
  if (const Json* value = fields::find(body, "thinking")) {
    const Json& object = fields::object(*value, "thinking");
    const std::string& type = fields::string(fields::require(object, "type", "thinking."), "thinking.type");
    if (type == "enabled" || type == "adaptive") {
      thinking = true;
    } else if (type == "disabled") {
      thinking = false;
    } else {
      reject("thinking.type: expected 'enabled', 'adaptive' or 'disabled'", "thinking.type");
    }
  }
  if (const Json* value = fields::find(body, "reasoning_effort")) {
    const std::string& effort = fields::string(*value, "reasoning_effort");
    if (effort == "none") {
      if (!thinking) thinking = false;
    } else if (effort == "minimal" || effort == "low") {
      conversation.reasoning_effort = ReasoningEffort::Low;
    } else if (effort == "medium" || effort == "high") {
      conversation.reasoning_effort = ReasoningEffort::High;
    } else if (effort == "xhigh") {
      conversation.reasoning_effort = ReasoningEffort::XHigh;
    } else if (effort == "max" || effort == "ultra") {
      conversation.reasoning_effort = ReasoningEffort::Max;
    } else {
      reject("reasoning_effort: expected one of none, minimal, low, medium, high, xhigh, max", "reasoning_effort");
    }
  }
  // An explicit toggle wins; an effort other than none leaves the default, which is on.
  conversation.thinking = thinking.value_or(true);
}

}  // namespace

ApiRequest parse_chat_completions_request(const nlohmann::ordered_json& body) {
  fields::object(body, "body");
  ApiRequest request;
  Conversation& conversation = request.conversation;
  GenerationOptions& options = request.options;
  options.model = fields::string(fields::require(body, "model", ""), "model");
  const Json& messages = fields::array(fields::require(body, "messages", ""), "messages");
  if (messages.empty()) reject("Empty input messages", "messages");

  parse_thinking(body, conversation);

  if (const Json* tools = fields::find(body, "tools")) {
    const Json& list = fields::array(*tools, "tools");
    for (std::size_t i = 0; i < list.size(); ++i) conversation.tools.push_back(parse_tool(list[i], i));
  }
  if (const Json* choice = fields::find(body, "tool_choice")) {
    if (choice->is_string()) {
      const std::optional<ToolChoice> mode = fields::tool_choice_mode(choice->get_ref<const std::string&>());
      if (!mode) reject("tool_choice: expected 'none', 'auto', 'required' or a named function", "tool_choice");
      conversation.tool_choice = *mode;
    } else {
      const Json& named = fields::object(*choice, "tool_choice");
      const Json& function = fields::object(fields::require(named, "function", "tool_choice."), "tool_choice.function");
      choose_named_tool(conversation,
                        fields::string(fields::require(function, "name", "tool_choice.function."), "tool_choice.function.name"));
    }
  }

  conversation.parallel_tool_calls = fields::optional_bool(body, "parallel_tool_calls").value_or(true);

  for (std::size_t i = 0; i < messages.size(); ++i) {
    Message message = parse_message(messages[i], i);
    // An empty system message says nothing and is dropped (recipe §3.1).
    if (message.role == Role::System && message.content.empty()) continue;
    if (message.role == Role::System && plain_text(message.content).empty()) continue;
    conversation.messages.push_back(std::move(message));
  }
  check_tool_call_pairing(conversation.messages);

  if (const Json* format = fields::find(body, "response_format"))
    if (read_response_format(*format, "response_format", options.constraint))
      conversation.response_format = ResponseFormat::JsonObject;
  read_engine_constraints(body, options.constraint);

  if (const Json* stop = fields::find(body, "stop")) {
    if (stop->is_string()) {
      options.stop.push_back(stop->get<std::string>());
    } else {
      const Json& list = fields::array(*stop, "stop");
      if (list.size() > kMaxStopSequences) {
        reject(str_cat("ChatCompletionStopSequences string array too long: ", list.size()), "stop");
      }
      for (std::size_t k = 0; k < list.size(); ++k) options.stop.push_back(fields::string(list[k], str_cat("stop[", k, "]")));
    }
  }
  options.stream = fields::optional_bool(body, "stream").value_or(false);
  if (const Json* stream_options = fields::find(body, "stream_options")) {
    if (!options.stream) reject("stream_options should be set along with stream = true", "stream_options");
    if (const Json* usage = fields::find(fields::object(*stream_options, "stream_options"), "include_usage")) {
      options.include_usage = fields::boolean(*usage, "stream_options.include_usage");
    }
  }
  if (const std::optional<int64_t> n = fields::optional_integer(body, "n"); n && *n != 1) {
    reject("Invalid n value (currently only n = 1 is supported)", "n");
  }
  fields::read_temperature_and_top_p(body, options.sampling);
  if (const std::optional<double> f = fields::optional_number(body, "frequency_penalty")) {
    fields::check_range(*f, -2, 2, "frequency_penalty");
    options.sampling.frequency_penalty = static_cast<float>(*f);
  }
  if (const std::optional<double> p = fields::optional_number(body, "presence_penalty")) {
    fields::check_range(*p, -2, 2, "presence_penalty");
    options.sampling.presence_penalty = static_cast<float>(*p);
  }
  if (const std::optional<int64_t> seed = fields::optional_integer(body, "seed")) {
    if (*seed < 0) reject("seed must be in [0, 2^63)", "seed");
    options.sampling.seed = static_cast<uint64_t>(*seed);
  }
  std::optional<int64_t> max_tokens = fields::optional_integer(body, "max_tokens");
  if (!max_tokens) max_tokens = fields::optional_integer(body, "max_completion_tokens");
  if (max_tokens) {
    fields::check_max_tokens(*max_tokens);
    options.max_tokens = max_tokens;
  }
  // OpenAI's rules and wording: top_logprobs needs logprobs: true; without top_logprobs each
  // token comes with an empty top_logprobs list.
  const bool logprobs = fields::optional_bool(body, "logprobs").value_or(false);
  if (const std::optional<int64_t> top = fields::optional_integer(body, "top_logprobs")) {
    if (*top < 0)
      reject(str_cat("Invalid 'top_logprobs': integer below minimum value. Expected a value >= 0, but got ", *top,
                     " instead."),
             "top_logprobs");
    if (*top > engine::kMaxLogprobs)
      reject(str_cat("Invalid 'top_logprobs': integer above maximum value. Expected a value <= ",
                     engine::kMaxLogprobs, ", but got ", *top, " instead."),
             "top_logprobs");
    if (!logprobs) reject("Invalid value for 'top_logprobs': 'logprobs' must be true when 'top_logprobs' is set.", "top_logprobs");
    options.sampling.logprobs = static_cast<int32_t>(*top);
  } else if (logprobs) {
    options.sampling.logprobs = 0;
  }
  options.ignore_eos = fields::optional_bool(body, "ignore_eos").value_or(false);

  validate_conversation(conversation);
  return request;
}

}  // namespace deepinfer::api

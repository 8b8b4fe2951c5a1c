#include "api/chunk_anthropic_messages.h"

#include <utility>
#include <variant>

#include "core/error.h"

namespace deepinfer::api {
namespace {

std::string tool_use_id(const std::string& message_id, int index) {
  return "toolu_" + message_id + "_" + std::to_string(index);
}

WireJson stop_sequence_json(const StreamFinish& finish) {
  return finish.stop_sequence ? WireJson(*finish.stop_sequence) : WireJson(nullptr);
}

WireJson tool_input(const std::string& arguments) {
  WireJson input = WireJson::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return input.is_object() ? input : WireJson::object();
}

}  // namespace

std::string messages_stop_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop:
    case FinishReason::end_of_stream: return "end_turn";
    case FinishReason::tool_calls: return "tool_use";
    case FinishReason::length: return "max_tokens";
    case FinishReason::stop_sequence: return "stop_sequence";
    case FinishReason::content_filter: return "refusal";
  }
  return "end_turn";
}

// Anthropic counts input_tokens apart from the tokens read from the cache.
WireJson messages_usage(const PromptUsage& prompt, int64_t output_tokens) {
  WireJson usage;
  usage["input_tokens"] = prompt.prompt_tokens - prompt.prompt_cache_hit_tokens;
  usage["cache_creation_input_tokens"] = 0;
  usage["cache_read_input_tokens"] = prompt.prompt_cache_hit_tokens;
  usage["output_tokens"] = output_tokens;
  usage["service_tier"] = "standard";
  return usage;
}

MessagesEventWriter::MessagesEventWriter(MessagesFormat format) : format_(std::move(format)) {}

void MessagesEventWriter::open(Block block, WireJson content_block, std::vector<MessagesEvent>& out) {
  close(out);
  open_block_ = block;
  ++block_index_;
  WireJson data;
  data["type"] = "content_block_start";
  data["index"] = block_index_;
  data["content_block"] = std::move(content_block);
  out.push_back({"content_block_start", std::move(data)});
  if (!pinged_) {
    pinged_ = true;
    out.push_back({"ping", WireJson{{"type", "ping"}}});
  }
}

void MessagesEventWriter::delta(WireJson body, std::vector<MessagesEvent>& out) const {
  WireJson data;
  data["type"] = "content_block_delta";
  data["index"] = block_index_;
  data["delta"] = std::move(body);
  out.push_back({"content_block_delta", std::move(data)});
}

void MessagesEventWriter::close(std::vector<MessagesEvent>& out) {
  if (open_block_ == Block::none) return;
  // The recipe signs a thinking block with the message id.
  if (open_block_ == Block::thinking)
    delta(WireJson{{"type", "signature_delta"}, {"signature", format_.id}}, out);
  WireJson data;
  data["type"] = "content_block_stop";
  data["index"] = block_index_;
  out.push_back({"content_block_stop", std::move(data)});
  open_block_ = Block::none;
}

std::vector<MessagesEvent> MessagesEventWriter::write(const StreamEvent& event) {
  std::vector<MessagesEvent> out;
  if (const auto* start = std::get_if<StreamStart>(&event)) {
    WireJson message;
    message["id"] = format_.id;
    message["type"] = "message";
    message["role"] = "assistant";
    message["model"] = format_.model;
    message["content"] = WireJson::array();
    message["stop_reason"] = nullptr;
    message["stop_sequence"] = nullptr;
    message["usage"] = messages_usage(start->prompt, 0);
    WireJson data;
    data["type"] = "message_start";
    data["message"] = std::move(message);
    out.push_back({"message_start", std::move(data)});
  } else if (const auto* finish = std::get_if<StreamFinish>(&event)) {
    close(out);
    WireJson data;
    data["type"] = "message_delta";
    data["delta"] = {{"stop_reason", messages_stop_reason(finish->reason)},
                     {"stop_sequence", stop_sequence_json(*finish)}};
    data["usage"] = messages_usage(finish->prompt, finish->completion.completion_tokens);
    out.push_back({"message_delta", std::move(data)});
    out.push_back({"message_stop", WireJson{{"type", "message_stop"}}});
  } else {
    const OutputEvent& output = std::get<OutputEvent>(event);
    switch (output.kind) {
      case OutputEvent::Kind::reasoning_delta:
        if (open_block_ != Block::thinking)
          open(Block::thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, out);
        delta({{"type", "thinking_delta"}, {"thinking", output.text}}, out);
        break;
      case OutputEvent::Kind::content_delta:
        if (open_block_ != Block::text) open(Block::text, {{"type", "text"}, {"text", ""}}, out);
        delta({{"type", "text_delta"}, {"text", output.text}}, out);
        break;
      case OutputEvent::Kind::tool_call_start:
        open(Block::tool_use,
             {{"type", "tool_use"},
              {"id", tool_use_id(format_.id, output.tool_index)},
              {"name", output.text},
              {"input", WireJson::object()}},
             out);
        break;
      case OutputEvent::Kind::tool_call_arguments_delta:
        if (open_block_ == Block::tool_use)
          delta({{"type", "input_json_delta"}, {"partial_json", output.text}}, out);
        break;
    }
  }
  return out;
}

std::string anthropic_error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 402: return "billing_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    case 504: return "timeout_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

WireJson messages_error(const ApiError& error) {
  WireJson body;
  body["type"] = "error";
  body["error"] = {{"type", anthropic_error_type(error.status())}, {"message", error.message()}};
  return body;
}

WireJson messages_body(const MessagesFormat& format, const CollectedOutput& output) {
  if (!output.finish) fail("messages_body: the answer has not finished");
  WireJson content = WireJson::array();
  if (!output.reasoning.empty())
    content.push_back(
        {{"type", "thinking"}, {"thinking", output.reasoning}, {"signature", format.id}});
  if (!output.content.empty()) content.push_back({{"type", "text"}, {"text", output.content}});
  for (std::size_t k = 0; k < output.tool_calls.size(); ++k) {
    content.push_back({{"type", "tool_use"},
                       {"id", tool_use_id(format.id, static_cast<int>(k))},
                       {"name", output.tool_calls[k].name},
                       {"input", tool_input(output.tool_calls[k].arguments)}});
  }
  WireJson body;
  body["id"] = format.id;
  body["type"] = "message";
  body["role"] = "assistant";
  body["model"] = format.model;
  body["content"] = std::move(content);
  body["stop_reason"] = messages_stop_reason(output.finish->reason);
  body["stop_sequence"] = stop_sequence_json(*output.finish);
  body["usage"] = messages_usage(output.finish->prompt, output.finish->completion.completion_tokens);
  return body;
}

}  // namespace deepinfer::api

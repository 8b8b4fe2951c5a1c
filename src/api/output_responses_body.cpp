#include "api/output_responses_body.h"

#include <utility>

#include "core/error.h"

namespace deepinfer::api {
namespace {

WireJson usage_json(const ResponsesFormat& format, const StreamFinish& finish) {
  WireJson usage;
  usage["input_tokens"] = finish.prompt.prompt_tokens;
  usage["input_tokens_details"] = {{"cached_tokens", finish.prompt.prompt_cache_hit_tokens}};
  usage["output_tokens"] = finish.completion.completion_tokens;
  usage["output_tokens_details"] = {
      {"reasoning_tokens", format.reasoning_tokens ? finish.completion.reasoning_tokens : 0}};
  usage["total_tokens"] = finish.prompt.prompt_tokens + finish.completion.completion_tokens;
  return usage;
}

}  // namespace

std::string responses_item_id(const ResponsesFormat& format, std::string_view prefix, std::size_t position) {
  return std::string(prefix) + "_" + format.id + "_" + std::to_string(position);
}

WireJson responses_reasoning_text(const std::string& text) {
  return {{"type", "reasoning_text"}, {"text", text}};
}

WireJson responses_output_text(const std::string& text) {
  WireJson part;
  part["type"] = "output_text";
  part["annotations"] = WireJson::array();
  part["logprobs"] = WireJson::array();
  part["text"] = text;
  return part;
}

WireJson responses_reasoning_item(const std::string& id, std::string_view status, WireJson content) {
  WireJson item;
  item["type"] = "reasoning";
  item["id"] = id;
  item["status"] = status;
  item["content"] = std::move(content);
  item["summary"] = WireJson::array();
  return item;
}

WireJson responses_message_item(const std::string& id, std::string_view status, WireJson content) {
  WireJson item;
  item["type"] = "message";
  item["id"] = id;
  item["status"] = status;
  item["role"] = "assistant";
  item["phase"] = "final_answer";
  item["content"] = std::move(content);
  return item;
}

WireJson responses_function_call_item(const std::string& id, std::string_view status, const std::string& call_id,
                                      const std::string& name, const std::string& arguments) {
  WireJson item;
  item["type"] = "function_call";
  item["id"] = id;
  item["status"] = status;
  item["call_id"] = call_id;
  if (const std::size_t separator = name.find("::"); separator != std::string::npos) {
    item["name"] = name.substr(separator + 2);
    item["namespace"] = name.substr(0, separator);
  } else {
    item["name"] = name;
  }
  item["arguments"] = arguments;
  return item;
}

WireJson responses_object(const ResponsesFormat& format, WireJson output, const StreamFinish* finish) {
  const bool incomplete = finish && finish->reason == FinishReason::length;
  WireJson body;
  body["id"] = format.id;
  body["object"] = "response";
  body["created_at"] = format.created_at;
  body["model"] = format.model;
  body["status"] = !finish ? "in_progress" : incomplete ? "incomplete" : "completed";
  body["completed_at"] = finish ? WireJson(format.completed_at) : WireJson(nullptr);
  body["error"] = nullptr;
  body["incomplete_details"] = incomplete ? WireJson{{"reason", "max_output_tokens"}} : WireJson(nullptr);
  body["output"] = std::move(output);
  body["usage"] = finish ? usage_json(format, *finish) : WireJson(nullptr);
  return body;
}

WireJson responses_body(const ResponsesFormat& format, const CollectedOutput& output) {
  if (!output.finish) fail("responses_body: the answer has not finished");
  WireJson items = WireJson::array();
  if (!output.reasoning.empty())
    items.push_back(responses_reasoning_item(responses_item_id(format, "rs", items.size()), "completed",
                                             WireJson::array({responses_reasoning_text(output.reasoning)})));
  if (!output.content.empty())
    items.push_back(responses_message_item(responses_item_id(format, "msg", items.size()), "completed",
                                           WireJson::array({responses_output_text(output.content)})));
  for (const CollectedToolCall& call : output.tool_calls) {
    const std::size_t position = items.size();
    items.push_back(responses_function_call_item(responses_item_id(format, "fc", position), "completed",
                                                 responses_item_id(format, "call", position), call.name,
                                                 call.arguments));
  }
  // The item being written when max_output_tokens ran out is incomplete (OpenAI's item status).
  if (output.finish->reason == FinishReason::length && !items.empty()) items.back()["status"] = "incomplete";
  return responses_object(format, std::move(items), &*output.finish);
}

}  // namespace deepinfer::api

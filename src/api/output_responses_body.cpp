#include "api/output_responses_body.h"

#include <utility>

#include "core/error.h"

namespace deepinfer::api {

WireJson responses_body(const ResponsesFormat& format, const CollectedOutput& output) {
  if (!output.finish) fail("responses_body: the answer has not finished");
  WireJson items = WireJson::array();
  auto item_id = [&](const char* prefix) {
    return std::string(prefix) + "_" + format.id + "_" + std::to_string(items.size());
  };
  if (!output.reasoning.empty()) {
    WireJson item;
    item["type"] = "reasoning";
    item["id"] = item_id("rs");
    item["status"] = "completed";
    item["content"] = WireJson::array({{{"type", "reasoning_text"}, {"text", output.reasoning}}});
    item["summary"] = WireJson::array();
    items.push_back(std::move(item));
  }
  if (!output.content.empty()) {
    WireJson text;
    text["type"] = "output_text";
    text["annotations"] = WireJson::array();
    text["logprobs"] = WireJson::array();
    text["text"] = output.content;
    WireJson item;
    item["type"] = "message";
    item["id"] = item_id("msg");
    item["status"] = "completed";
    item["role"] = "assistant";
    item["phase"] = "final_answer";
    item["content"] = WireJson::array({std::move(text)});
    items.push_back(std::move(item));
  }
  for (const CollectedToolCall& call : output.tool_calls) {
    WireJson item;
    item["type"] = "function_call";
    item["id"] = item_id("fc");
    item["status"] = "completed";
    item["call_id"] = item_id("call");
    item["name"] = call.name;
    item["arguments"] = call.arguments;
    items.push_back(std::move(item));
  }
  const StreamFinish& finish = *output.finish;
  const bool incomplete = finish.reason == FinishReason::length;
  WireJson usage;
  usage["input_tokens"] = finish.prompt.prompt_tokens;
  usage["input_tokens_details"] = {{"cached_tokens", finish.prompt.prompt_cache_hit_tokens}};
  usage["output_tokens"] = finish.completion.completion_tokens;
  usage["output_tokens_details"] = {
      {"reasoning_tokens", format.reasoning_tokens ? finish.completion.reasoning_tokens : 0}};
  usage["total_tokens"] = finish.prompt.prompt_tokens + finish.completion.completion_tokens;
  WireJson body;
  body["id"] = format.id;
  body["object"] = "response";
  body["created_at"] = format.created_at;
  body["model"] = format.model;
  body["status"] = incomplete ? "incomplete" : "completed";
  body["completed_at"] = format.completed_at;
  body["error"] = nullptr;
  body["incomplete_details"] =
      incomplete ? WireJson{{"reason", "max_output_tokens"}} : WireJson(nullptr);
  body["output"] = std::move(items);
  body["usage"] = std::move(usage);
  return body;
}

}  // namespace deepinfer::api

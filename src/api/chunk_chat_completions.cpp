#include "api/chunk_chat_completions.h"

#include <utility>
#include <variant>

#include "core/error.h"

namespace deepinfer::api {
namespace {

WireJson fingerprint_json(const std::optional<std::string>& fingerprint) {
  return fingerprint ? WireJson(*fingerprint) : WireJson(nullptr);
}

std::string tool_call_id(const std::string& response_id, int index) {
  return "call_" + response_id + "_" + std::to_string(index);
}

WireJson byte_values(const std::string& bytes) {
  WireJson out = WireJson::array();
  for (const char byte : bytes) out.push_back(static_cast<int>(static_cast<unsigned char>(byte)));
  return out;
}

WireJson logprobs_json(const std::vector<TokenLogprob>& tokens) {
  WireJson content = WireJson::array();
  for (const TokenLogprob& token : tokens) {
    WireJson top = WireJson::array();
    for (const LogprobAlternative& alternative : token.top_logprobs)
      top.push_back({{"token", alternative.token},
                     {"logprob", alternative.logprob},
                     {"bytes", byte_values(alternative.bytes)}});
    content.push_back({{"token", token.token},
                       {"logprob", token.logprob},
                       {"bytes", byte_values(token.bytes)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

}  // namespace

std::string chat_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop_sequence:
    case FinishReason::end_of_stream: return "stop";
    default: return std::string(finish_reason_name(reason));
  }
}

WireJson chat_usage(const PromptUsage& prompt, const CompletionUsage& completion,
                    bool reasoning_tokens) {
  WireJson usage;
  usage["prompt_tokens"] = prompt.prompt_tokens;
  usage["completion_tokens"] = completion.completion_tokens;
  usage["total_tokens"] = prompt.prompt_tokens + completion.completion_tokens;
  usage["prompt_tokens_details"] = {{"cached_tokens", prompt.prompt_cache_hit_tokens}};
  if (reasoning_tokens)
    usage["completion_tokens_details"] = {{"reasoning_tokens", completion.reasoning_tokens}};
  usage["prompt_cache_hit_tokens"] = prompt.prompt_cache_hit_tokens;
  usage["prompt_cache_miss_tokens"] = prompt.prompt_tokens - prompt.prompt_cache_hit_tokens;
  return usage;
}

ChatCompletionsChunkWriter::ChatCompletionsChunkWriter(ChatCompletionsFormat format)
    : format_(std::move(format)) {}

WireJson ChatCompletionsChunkWriter::chunk(WireJson delta,
                                           const std::optional<std::string>& finish_reason,
                                           const WireJson* usage, WireJson logprobs) const {
  WireJson choice;
  choice["index"] = 0;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_reason ? WireJson(*finish_reason) : WireJson(nullptr);
  WireJson out;
  out["id"] = format_.id;
  out["object"] = "chat.completion.chunk";
  out["created"] = format_.created;
  out["model"] = format_.model;
  out["system_fingerprint"] = fingerprint_json(fingerprint_);
  out["choices"] = WireJson::array({std::move(choice)});
  if (usage != nullptr)
    out["usage"] = *usage;
  else if (format_.include_usage)
    out["usage"] = nullptr;
  return out;
}

std::vector<WireJson> ChatCompletionsChunkWriter::write(const StreamEvent& event) {
  std::vector<WireJson> chunks;
  if (const auto* start = std::get_if<StreamStart>(&event)) {
    fingerprint_ = start->prompt.system_fingerprint;
    WireJson delta;
    delta["role"] = "assistant";
    if (format_.thinking) {
      delta["content"] = nullptr;
      delta["reasoning_content"] = "";
    } else {
      delta["content"] = "";
    }
    chunks.push_back(chunk(std::move(delta), std::nullopt, nullptr));
  } else if (const auto* finish = std::get_if<StreamFinish>(&event)) {
    WireJson delta;
    delta["content"] = "";
    if (format_.thinking) delta["reasoning_content"] = nullptr;
    const WireJson usage = chat_usage(finish->prompt, finish->completion, format_.reasoning_tokens);
    chunks.push_back(chunk(std::move(delta), chat_finish_reason(finish->reason), &usage));
  } else {
    const OutputEvent& output = std::get<OutputEvent>(event);
    WireJson delta;
    WireJson logprobs = nullptr;
    switch (output.kind) {
      case OutputEvent::Kind::reasoning_delta:
        delta["content"] = nullptr;
        delta["reasoning_content"] = output.text;
        break;
      case OutputEvent::Kind::content_delta:
        delta["content"] = output.text;
        if (format_.thinking) delta["reasoning_content"] = nullptr;
        if (format_.logprobs) logprobs = logprobs_json(output.logprobs);
        break;
      case OutputEvent::Kind::tool_call_start: {
        WireJson call;
        call["index"] = output.tool_index;
        call["id"] = tool_call_id(format_.id, output.tool_index);
        call["type"] = "function";
        call["function"] = {{"name", output.text}, {"arguments", ""}};
        delta["tool_calls"] = WireJson::array({std::move(call)});
        break;
      }
      case OutputEvent::Kind::tool_call_arguments_delta: {
        WireJson call;
        call["index"] = output.tool_index;
        call["function"] = {{"arguments", output.text}};
        delta["tool_calls"] = WireJson::array({std::move(call)});
        break;
      }
    }
    chunks.push_back(chunk(std::move(delta), std::nullopt, nullptr, std::move(logprobs)));
  }
  return chunks;
}

WireJson chat_completion_body(const ChatCompletionsFormat& format, const CollectedOutput& output) {
  if (!output.finish) fail("chat_completion_body: the answer has not finished");
  WireJson message;
  message["role"] = "assistant";
  message["content"] = output.content;
  if (format.thinking) message["reasoning_content"] = output.reasoning;
  if (!output.tool_calls.empty()) {
    WireJson calls = WireJson::array();
    for (std::size_t k = 0; k < output.tool_calls.size(); ++k) {
      WireJson call;
      call["id"] = tool_call_id(format.id, static_cast<int>(k));
      call["type"] = "function";
      call["function"] = {{"name", output.tool_calls[k].name},
                          {"arguments", output.tool_calls[k].arguments}};
      calls.push_back(std::move(call));
    }
    message["tool_calls"] = std::move(calls);
  }
  WireJson choice;
  choice["index"] = 0;
  choice["message"] = std::move(message);
  choice["logprobs"] = format.logprobs ? logprobs_json(output.content_logprobs) : WireJson(nullptr);
  choice["finish_reason"] = chat_finish_reason(output.finish->reason);
  WireJson body;
  body["id"] = format.id;
  body["object"] = "chat.completion";
  body["created"] = format.created;
  body["model"] = format.model;
  body["system_fingerprint"] = fingerprint_json(output.prompt.system_fingerprint);
  body["choices"] = WireJson::array({std::move(choice)});
  body["usage"] = chat_usage(output.finish->prompt, output.finish->completion, format.reasoning_tokens);
  return body;
}

}  // namespace deepinfer::api

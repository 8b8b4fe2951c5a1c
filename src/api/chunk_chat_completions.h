#pragma once
// OpenAI Chat Completions output as DeepSeek's API writes it (docs/recipe.md §2.4): the
// chat.completion.chunk objects of a stream and the chat.completion body of a plain response.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/output_collector.h"
#include "api/output_events.h"
#include "api/sse_format.h"

namespace deepinfer::api {

struct ChatCompletionsFormat {
  std::string id;  // response id; tool call k gets id "call_<id>_<k>"
  std::string model;
  int64_t created = 0;  // Unix seconds
  // The request ran in thinking mode: deltas and the message carry reasoning_content.
  bool thinking = false;
  // "usage": null on every chunk before the last (stream_options.include_usage); without it the
  // key is left out there. The last chunk always has the usage.
  bool include_usage = true;
  // usage.completion_tokens_details.reasoning_tokens, as the DeepSeek API documents it. The
  // recipe's goldens predate it, so the conformance test turns it off.
  bool reasoning_tokens = true;
  // The request asked for logprobs: content chunks and the message carry
  // {"content": [...], "refusal": null} instead of null.
  bool logprobs = false;
};

// Finish reason as Chat Completions spells it (stop_sequence and end_of_stream become "stop").
std::string chat_finish_reason(FinishReason reason);
WireJson chat_usage(const PromptUsage& prompt, const CompletionUsage& completion,
                    bool reasoning_tokens);

class ChatCompletionsChunkWriter {
 public:
  explicit ChatCompletionsChunkWriter(ChatCompletionsFormat format);
  // The chunks one event becomes (none for an event that carries nothing).
  std::vector<WireJson> write(const StreamEvent& event);

 private:
  WireJson chunk(WireJson delta, const std::optional<std::string>& finish_reason,
                 const WireJson* usage, WireJson logprobs = nullptr) const;

  ChatCompletionsFormat format_;
  std::optional<std::string> fingerprint_;
};

// The non-streaming body; `output` must be complete (output.finish set).
WireJson chat_completion_body(const ChatCompletionsFormat& format, const CollectedOutput& output);

}  // namespace deepinfer::api

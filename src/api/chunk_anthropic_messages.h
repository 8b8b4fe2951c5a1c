#pragma once
// Anthropic Messages output as the recipe writes it (docs/recipe.md §3.3): the server-sent events
// of a stream (message_start, content_block_start/delta/stop per thinking, text and tool_use
// block, message_delta, message_stop) and the message body of a plain response.
#include <cstdint>
#include <string>
#include <vector>

#include "api/api_error.h"
#include "api/output_collector.h"
#include "api/output_events.h"
#include "api/sse_format.h"

namespace deepinfer::api {

struct MessagesFormat {
  std::string id;  // message id; also the thinking signature; tool k gets "toolu_<id>_<k>"
  std::string model;
};

struct MessagesEvent {
  std::string type;  // the SSE event name, equal to data["type"]
  WireJson data;
};

// stop_reason for a finish: end_turn, tool_use, max_tokens, stop_sequence or refusal.
std::string messages_stop_reason(FinishReason reason);
WireJson messages_usage(const PromptUsage& prompt, int64_t output_tokens);

class MessagesEventWriter {
 public:
  explicit MessagesEventWriter(MessagesFormat format);
  std::vector<MessagesEvent> write(const StreamEvent& event);

 private:
  enum class Block { none, thinking, text, tool_use };
  void open(Block block, WireJson content_block, std::vector<MessagesEvent>& out);
  void close(std::vector<MessagesEvent>& out);
  void delta(WireJson body, std::vector<MessagesEvent>& out) const;

  MessagesFormat format_;
  Block open_block_ = Block::none;
  int block_index_ = -1;
  bool pinged_ = false;
};

// Anthropic's error type for an HTTP status: invalid_request_error (400, 422 and any other 4xx),
// authentication_error 401, billing_error 402, permission_error 403, not_found_error 404,
// request_too_large 413, rate_limit_error 429, timeout_error 504, overloaded_error 503 and 529,
// api_error (500 and any other 5xx).
std::string anthropic_error_type(int status);
// Anthropic's error object, {"type": "error", "error": {"type", "message"}}, the type chosen by
// the error's status: the body of every non-2xx answer of the Anthropic endpoints and the data of
// the stream's `error` event.
WireJson messages_error(const ApiError& error);

// The non-streaming body; `output` must be complete. A tool call whose arguments are not a JSON
// object (cut short by max_tokens, say) gets input {}.
WireJson messages_body(const MessagesFormat& format, const CollectedOutput& output);

}  // namespace deepinfer::api

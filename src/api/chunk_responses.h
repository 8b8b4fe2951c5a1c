#pragma once
// OpenAI Responses API server-sent events (docs/recipe.md §3.2), as the official SDK's
// ResponseStreamEvent types define them: response.created and response.in_progress; per output
// item output_item.added, then for reasoning and message items content_part.added,
// reasoning_text.delta / output_text.delta, their .done, content_part.done, or for function calls
// function_call_arguments.delta / .done; output_item.done; then response.completed (or
// response.incomplete when max_output_tokens cut the answer). Every event carries
// sequence_number, counting from 0. The final response is built from the same items as
// responses_body, so it equals the non-streaming body.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/api_error.h"
#include "api/output_events.h"
#include "api/output_responses_body.h"
#include "api/sse_format.h"

namespace deepinfer::api {

struct ResponsesEvent {
  std::string type;  // the SSE event name, equal to data["type"]
  WireJson data;
};

class ResponsesEventWriter {
 public:
  explicit ResponsesEventWriter(ResponsesFormat format);
  std::vector<ResponsesEvent> write(const StreamEvent& event);
  // The `error` event for a failure after the stream started; it ends the stream.
  ResponsesEvent error(const ApiError& error);
  // completed_at of the final response (the stream learns it only when the answer ends).
  void set_completed_at(int64_t unix_seconds) { format_.completed_at = unix_seconds; }

 private:
  enum class Item { none, reasoning, message, function_call };
  ResponsesEvent event(const char* type, WireJson fields);
  void open(Item item, const std::string& name, std::vector<ResponsesEvent>& out);
  // `status`: "completed", or "incomplete" for the item max_output_tokens cut.
  void close(std::vector<ResponsesEvent>& out, std::string_view status = "completed");
  void text_delta(Item item, const std::string& text, std::vector<ResponsesEvent>& out);
  WireJson part_fields(WireJson part) const;

  ResponsesFormat format_;
  int64_t sequence_number_ = 0;
  WireJson done_items_ = WireJson::array();
  Item open_item_ = Item::none;
  std::string item_id_;
  std::string call_name_;
  std::string text_;  // the open item's text, or the call's arguments, so far
};

}  // namespace deepinfer::api

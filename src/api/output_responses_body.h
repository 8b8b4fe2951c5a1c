#pragma once
// OpenAI Responses API (POST /responses) wire objects as the recipe writes them (docs/recipe.md
// §3.2): the response object, its output items and usage. The non-streaming body is built here;
// the stream (chunk_responses.h) builds its events from the same pieces, so a streamed answer's
// final response equals the body.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "api/output_collector.h"
#include "api/sse_format.h"

namespace deepinfer::api {

struct ResponsesFormat {
  std::string id;  // items are rs_<id>_<n>, msg_<id>_<n>, fc_<id>_<n> (call_id call_<id>_<n>)
  std::string model;
  int64_t created_at = 0;
  int64_t completed_at = 0;
  // output_tokens_details.reasoning_tokens: the count, or 0 as the recipe reports.
  bool reasoning_tokens = true;
};

// "<prefix>_<id>_<position>": the id of the output item at `position` (rs, msg, fc, call).
std::string responses_item_id(const ResponsesFormat& format, std::string_view prefix, std::size_t position);

// Content parts.
WireJson responses_reasoning_text(const std::string& text);
WireJson responses_output_text(const std::string& text);
// Output items; `status` is in_progress while streamed, then completed (or incomplete when the
// token limit cut it). `content` is an array of parts (empty while the item has only been added).
// A call to a namespace's tool (flattened to "ns::name" for the prompt; "::" is in no tool name
// otherwise) is reported as `name` + `namespace` (recipe §3.2), as the input items take it.
WireJson responses_reasoning_item(const std::string& id, std::string_view status, WireJson content);
WireJson responses_message_item(const std::string& id, std::string_view status, WireJson content);
WireJson responses_function_call_item(const std::string& id, std::string_view status, const std::string& call_id,
                                      const std::string& name, const std::string& arguments);

// The response object around `output`: in progress (no finish yet: status in_progress, usage
// null), or completed / incomplete (max_output_tokens) with the usage of `finish`.
WireJson responses_object(const ResponsesFormat& format, WireJson output, const StreamFinish* finish);

// The non-streaming body; `output` must be complete.
WireJson responses_body(const ResponsesFormat& format, const CollectedOutput& output);

}  // namespace deepinfer::api

#pragma once
// OpenAI Responses API (POST /responses) non-streaming body as the recipe writes it
// (docs/recipe.md §3.2). Streaming Responses events are not written yet.
#include <cstdint>
#include <string>

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

WireJson responses_body(const ResponsesFormat& format, const CollectedOutput& output);

}  // namespace deepinfer::api

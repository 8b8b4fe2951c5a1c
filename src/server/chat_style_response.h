#pragma once
// The response loop Chat Completions, Anthropic Messages and Responses share: run the request in
// the engine, decode the answer with the output parser, and either stream each event as SSE frames
// or gather the answer into one body. A matched stop string ends the request in the engine at once.
#include <functional>
#include <string>
#include <vector>

#include "api/api_error.h"
#include "api/constraint_warnings.h"
#include "api/output_collector.h"
#include "api/output_parser.h"
#include "api/prompt_renderer.h"
#include "api/request.h"
#include "api/sse_format.h"
#include "engine/engine.h"
#include "server/generation.h"
#include "server/handler_context.h"
#include "server/http_message.h"

namespace deepinfer::server {

struct ChatStyleJob {
  std::string endpoint;
  std::string id;
  engine::GenerationRequest request;
  api::OutputParsingOptions parsing;
  bool stream = false;
  // Streaming: the SSE frames one event becomes (a stateful protocol writer inside).
  std::function<std::vector<std::string>(const api::StreamEvent&)> frames;
  std::string end_frame;  // written after the last event ("data: [DONE]\n\n" for Chat)
  // The frame that reports a failure after the stream started (the status line is already sent).
  std::function<std::string(const api::ApiError&)> error_frame;
  // Not streaming: the body of the complete answer.
  std::function<api::WireJson(const api::CollectedOutput&)> body;
  // What the response says about its constraint (api/constraint_warnings.h): added to the body
  // here; a streaming handler's `frames` puts it in the first object it writes.
  api::WireJson warnings = api::WireJson::array();
};

// The request: prompt, max_tokens (checked against the context), sampling, EOS ids.
// `thinking`: the output starts in the reasoning section, so a constraint applies after </think>.
engine::GenerationRequest make_generation_request(const ServedModel& model, std::vector<int32_t> prompt,
                                                  const api::GenerationOptions& options, bool thinking = false);
// The conversation rendered in the model's format and encoded: the prompt a chat-style request runs.
std::vector<int32_t> encode_conversation(const ServedModel& model, const api::Conversation& conversation);
// What every chat-style handler starts with: the model name check, the rendered and encoded
// prompt, the engine request and the output parsing options (recipe §2.1; Anthropic Messages
// parses tool calls whenever tools are given). The handler adds its writers.
ChatStyleJob chat_style_job(const HandlerContext& context, const api::ApiRequest& parsed, std::string endpoint,
                            std::string id, bool parse_tools_whenever_given);

// Submits and sets the response's producer, which the connection drives; throws api::ApiError
// before anything is sent when the request is refused. A client that leaves cancels its
// request, streaming or not (the connection calls the producer's abandon()).
void respond_chat_style(const HandlerContext& context, ChatStyleJob job, const HttpRequest& request,
                        Clock::time_point arrival, HttpResponse& response);

}  // namespace deepinfer::server

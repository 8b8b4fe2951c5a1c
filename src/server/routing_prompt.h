#pragma once
// What the data-parallel front reads from a request before choosing its rank: the prompt tokens
// the rank's prefix cache will see (rendered and encoded exactly as the rank's handler does, so a
// shared prefix is a shared run of full blocks) and whether the client asked for a stream.
#include <cstdint>
#include <string>
#include <vector>

#include "api/prompt_renderer.h"
#include "api/prompt_tokens.h"
#include "server/http_message.h"

namespace deepinfer::server {

struct RoutingRequest {
  std::vector<int32_t> prompt;  // empty: no prompt to place (not a generation, or not parseable)
  bool stream = false;
};

// Chat Completions, Messages and Responses bodies are parsed, rendered in `format` and encoded;
// a Completions body's `prompt` (its first, when it holds several) is encoded as that endpoint
// does. A body the rank would refuse gives no prompt (the rank answers the error); never throws.
RoutingRequest routing_request(const HttpRequest& request, const api::PromptEncoder& encoder,
                               api::PromptFormat format);

}  // namespace deepinfer::server

#pragma once
// Server-sent-events framing (docs/recipe.md §2.4). Payloads are ordered JSON so the wire keeps the
// key order of the official APIs; text that is not valid UTF-8 is written with U+FFFD instead of
// failing the stream.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace deepinfer::api {

using WireJson = nlohmann::ordered_json;

// Compact JSON text of a payload.
std::string wire_text(const WireJson& payload);
// Chat Completions: "data: <json>\n\n".
std::string sse_data(const WireJson& payload);
// Chat Completions end of stream: "data: [DONE]\n\n".
std::string sse_done();
// Anthropic Messages / Responses: "event: <type>\ndata: <json>\n\n".
std::string sse_event(std::string_view type, const WireJson& payload);

}  // namespace deepinfer::api

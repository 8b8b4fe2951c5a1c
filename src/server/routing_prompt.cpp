#include "server/routing_prompt.h"

#include "api/request.h"
#include "server/http_io.h"

namespace deepinfer::server {
namespace {

using Json = nlohmann::ordered_json;

std::string endpoint_of(const std::string& path) { return path.rfind("/v1/", 0) == 0 ? path.substr(3) : path; }

std::vector<int32_t> completion_prompt(const Json& body, const Tokenizer& tokenizer) {
  auto prompt = body.find("prompt");
  if (prompt == body.end()) return {};
  // A list of prompts (strings or id lists) runs as several requests on one rank: place the first.
  if (prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_string() || (*prompt)[0].is_array()))
    return api::encode_completion_prompt((*prompt)[0], tokenizer);
  return api::encode_completion_prompt(*prompt, tokenizer);
}

}  // namespace

RoutingRequest routing_request(const HttpRequest& request, const api::PromptEncoder& encoder,
                               api::PromptFormat format) {
  RoutingRequest out;
  if (request.method != "POST") return out;
  const std::string endpoint = endpoint_of(request.path);
  try {
    const Json body = parse_json_body(request);
    auto stream = body.find("stream");
    out.stream = stream != body.end() && stream->is_boolean() && stream->get<bool>();
    if (endpoint == "/completions") {
      out.prompt = completion_prompt(body, encoder.tokenizer());
    } else if (endpoint == "/chat/completions" || endpoint == "/messages" || endpoint == "/responses") {
      const api::ApiRequest parsed = endpoint == "/chat/completions" ? api::parse_chat_completions_request(body)
                                     : endpoint == "/messages"       ? api::parse_messages_request(body)
                                                                     : api::parse_responses_request(body);
      out.prompt = encoder.encode(api::render_prompt(parsed.conversation, format));
    }
  } catch (const std::exception&) {
    out.prompt.clear();  // the rank will say what is wrong with it
  }
  return out;
}

}  // namespace deepinfer::server

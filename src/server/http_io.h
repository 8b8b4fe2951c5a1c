#pragma once
// What every handler does with HTTP: read a JSON body, answer with JSON or an error object in the
// shape of the endpoint (OpenAI's, or Anthropic's on the Anthropic endpoints), make response ids.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "server/http_message.h"
#include "server/json_body.h"

namespace deepinfer::server {

// The request body as order-preserving JSON, parsed in linear time within `budget`
// (server/json_body.h); 400 for malformed JSON, a body past the budget, or one that is not an object.
nlohmann::ordered_json parse_json_body(const HttpRequest& request, const JsonBudget& budget = {});

enum class ErrorShape {
  OpenAI,     // {"error": {"message", "type", "param", "code"}}
  Anthropic,  // {"type": "error", "error": {"type", "message"}}, the type by status (api::messages_error)
};
// Anthropic's shape for the Anthropic endpoints, /v1/messages and every path under it
// (/v1/messages/count_tokens), with or without the /v1 prefix; OpenAI's for every other path.
ErrorShape error_shape(const std::string& path);
std::string error_body(const api::ApiError& error, ErrorShape shape = ErrorShape::OpenAI);
// The one way the server answers an error, whatever raised it (the router, the handlers, the
// API key check, the HTTP layer's own 4xx, an exception): the error's status, and its object in the
// shape of the request's endpoint. Headers already set on `response` stay.
void send_error(const HttpRequest& request, HttpResponse& response, const api::ApiError& error);
void send_error(const std::string& path, HttpResponse& response, const api::ApiError& error);
void send_json(HttpResponse& response, const nlohmann::ordered_json& body, int status = 200);

// A fresh id: prefix + 24 random hex digits.
std::string make_response_id(const std::string& prefix);
int64_t unix_seconds();

// 404 model_not_found unless `requested` is the served name.
void check_model_name(const std::string& requested, const std::string& served);

}  // namespace deepinfer::server

#pragma once
// What every handler does with HTTP: read a JSON body, answer with JSON or an OpenAI-style error
// object, make response ids.
#include <cstdint>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "api/api_error.h"

namespace deepinfer::server {

// The request body as order-preserving JSON; 400 for malformed JSON or a body that is not an object.
nlohmann::ordered_json parse_json_body(const httplib::Request& request);

// {"error": {"message", "type", "param", "code"}} with the error's status.
void send_error(httplib::Response& response, const api::ApiError& error);
std::string error_body(const api::ApiError& error);
void send_json(httplib::Response& response, const nlohmann::ordered_json& body, int status = 200);

// A fresh id: prefix + 24 random hex digits.
std::string make_response_id(const std::string& prefix);
int64_t unix_seconds();

// 404 model_not_found unless `requested` is the served name.
void check_model_name(const std::string& requested, const std::string& served);

}  // namespace deepinfer::server

#include "server/http_io.h"

#include <chrono>
#include <random>

#include "api/sse_format.h"

namespace deepinfer::server {

nlohmann::ordered_json parse_json_body(const httplib::Request& request) {
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded())
    throw api::ApiError(400, "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
                             "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was "
                             "sent was not valid JSON.)",
                        "", "invalid_request_error", "invalid_json");
  if (!body.is_object()) throw api::ApiError(400, "The request body must be a JSON object", "", "invalid_request_error");
  return body;
}

std::string error_body(const api::ApiError& error) {
  auto nullable = [](const std::string& text) -> nlohmann::ordered_json {
    return text.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(text);
  };
  nlohmann::ordered_json body = {{"error",
                                  {{"message", error.what()},
                                   {"type", error.type()},
                                   {"param", nullable(error.param())},
                                   {"code", nullable(error.code())}}}};
  return api::wire_text(body);
}

void send_error(httplib::Response& response, const api::ApiError& error) {
  response.status = error.status();
  response.set_content(error_body(error), "application/json");
}

void send_json(httplib::Response& response, const nlohmann::ordered_json& body, int status) {
  response.status = status;
  response.set_content(api::wire_text(body), "application/json");
}

std::string make_response_id(const std::string& prefix) {
  thread_local std::mt19937_64 random{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id.push_back(kHex[random() % 16]);
  return id;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void check_model_name(const std::string& requested, const std::string& served) {
  if (requested != served)
    throw api::ApiError(404, "The model `" + requested + "` does not exist.", "model", "invalid_request_error",
                        "model_not_found");
}

}  // namespace deepinfer::server

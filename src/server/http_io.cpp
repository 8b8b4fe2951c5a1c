#include "server/http_io.h"

#include <chrono>
#include <random>
#include <string_view>

#include "api/chunk_anthropic_messages.h"
#include "api/sse_format.h"

namespace deepinfer::server {

nlohmann::ordered_json parse_json_body(const HttpRequest& request, const JsonBudget& budget) {
  JsonBodyResult parsed = parse_json_with_budget(request.body, budget);
  if (parsed.status == JsonBodyResult::Status::OverBudget)
    throw api::ApiError(400, parsed.message + " (the server's limit)", "", "invalid_request_error", "invalid_json");
  nlohmann::ordered_json body = std::move(parsed.value);
  if (parsed.status == JsonBodyResult::Status::Malformed) {
    // OpenAI's own wording on its endpoints (clients match on it); a neutral one on Anthropic's.
    const char* api = error_shape(request.path) == ErrorShape::Anthropic ? "The API" : "The OpenAI API";
    throw api::ApiError(400,
                        std::string("We could not parse the JSON body of your request. (HINT: This likely means you "
                                    "aren't using your HTTP library correctly. ") +
                            api + " expects a JSON payload, but what was sent was not valid JSON.)",
                        "", "invalid_request_error", "invalid_json");
  }
  if (!body.is_object()) throw api::ApiError(400, "The request body must be a JSON object", "", "invalid_request_error");
  return body;
}

ErrorShape error_shape(const std::string& path) {
  for (const char* root : {"/v1/messages", "/messages"}) {
    const std::string_view prefix(root);
    if (path.rfind(prefix, 0) == 0 && (path.size() == prefix.size() || path[prefix.size()] == '/'))
      return ErrorShape::Anthropic;
  }
  return ErrorShape::OpenAI;
}

std::string error_body(const api::ApiError& error, ErrorShape shape) {
  if (shape == ErrorShape::Anthropic) return api::wire_text(api::messages_error(error));
  auto nullable = [](const std::string& text) -> nlohmann::ordered_json {
    return text.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(text);
  };
  nlohmann::ordered_json body = {{"error",
                                  {{"message", error.message()},
                                   {"type", error.type()},
                                   {"param", nullable(error.param())},
                                   {"code", nullable(error.code())}}}};
  return api::wire_text(body);
}

void send_error(const std::string& path, HttpResponse& response, const api::ApiError& error) {
  response.status = error.status();
  response.set_content(error_body(error, error_shape(path)), "application/json");
}

void send_error(const HttpRequest& request, HttpResponse& response, const api::ApiError& error) {
  send_error(request.path, response, error);
}

void send_json(HttpResponse& response, const nlohmann::ordered_json& body, int status) {
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

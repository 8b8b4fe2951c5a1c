// Token counting without generating: vLLM's POST /tokenize and /detokenize, and Anthropic's
// POST /v1/messages/count_tokens. A conversation is parsed, rendered and encoded exactly as its
// generating endpoint does, so a count equals that request's usage.prompt_tokens.
#include "api/request.h"
#include "api/request_fields.h"
#include "api/prompt_tokens.h"
#include "server/chat_style_response.h"
#include "server/handlers.h"
#include "server/http_io.h"

namespace deepinfer::server {
namespace {

using Json = nlohmann::ordered_json;

// The model is optional on vLLM's utility endpoints; when given it must be the served one.
Json with_served_model(Json body, const std::string& served) {
  if (!body.contains("model")) body["model"] = served;
  return body;
}

}  // namespace

void handle_tokenize(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                     Clock::time_point) {
  const Json body = with_served_model(parse_json_body(request), context.model.name());
  const Tokenizer& tokenizer = context.model.tokenizer();
  std::vector<int32_t> tokens;
  const Json* messages = api::fields::find(body, "messages");
  const Json* prompt = api::fields::find(body, "prompt");
  if ((messages == nullptr) == (prompt == nullptr))
    throw api::ApiError(400, "give either `prompt` (text) or `messages` (a chat conversation)", "prompt");
  if (messages != nullptr) {
    const api::ApiRequest parsed = api::parse_chat_completions_request(body);
    check_model_name(parsed.options.model, context.model.name());
    tokens = encode_conversation(context.model, parsed.conversation);
  } else {
    check_model_name(api::fields::string(body.at("model"), "model"), context.model.name());
    const std::string& text = api::fields::string(*prompt, "prompt");
    const bool special = api::fields::optional_bool(body, "add_special_tokens").value_or(true);
    tokens = special ? api::encode_completion_prompt(*prompt, tokenizer) : tokenizer.encode(text);
  }
  Json out;
  out["count"] = tokens.size();
  out["max_model_len"] = context.model.context_length();
  out["tokens"] = tokens;
  if (api::fields::optional_bool(body, "return_token_strs").value_or(false)) {
    Json pieces = Json::array();
    for (int32_t id : tokens) pieces.push_back(tokenizer.id_to_token(id).value_or(""));
    out["token_strs"] = std::move(pieces);
  } else {
    out["token_strs"] = nullptr;
  }
  send_json(response, out);
}

void handle_detokenize(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                       Clock::time_point) {
  const Json body = with_served_model(parse_json_body(request), context.model.name());
  check_model_name(api::fields::string(body.at("model"), "model"), context.model.name());
  const Json& ids = api::fields::array(api::fields::require(body, "tokens", ""), "tokens");
  const Tokenizer& tokenizer = context.model.tokenizer();
  std::vector<int32_t> tokens;
  for (const Json& id : ids) {
    const int64_t value = api::fields::integer(id, "tokens");
    if (value < 0 || value >= static_cast<int64_t>(tokenizer.vocab_size()))
      throw api::ApiError(400, "token id " + std::to_string(value) + " is outside the tokenizer's vocabulary (" +
                                   std::to_string(tokenizer.vocab_size()) + " ids)",
                          "tokens");
    tokens.push_back(static_cast<int32_t>(value));
  }
  send_json(response, Json{{"prompt", tokenizer.decode(tokens)}});
}

void handle_count_tokens(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                         Clock::time_point) {
  Json body = parse_json_body(request);
  // count_tokens takes a Messages request without max_tokens; the parser requires one.
  if (!body.contains("max_tokens")) body["max_tokens"] = 1;
  const api::ApiRequest parsed = api::parse_messages_request(body);
  check_model_name(parsed.options.model, context.model.name());
  const std::vector<int32_t> tokens = encode_conversation(context.model, parsed.conversation);
  send_json(response, Json{{"input_tokens", tokens.size()}});
}

}  // namespace deepinfer::server

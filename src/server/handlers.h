#pragma once
// The endpoint handlers. Each answers the request, or throws api::ApiError before anything was
// sent (the router turns it into the error object).
#include "server/http_message.h"

#include "server/generation.h"
#include "server/handler_context.h"

namespace deepinfer::server {

// POST /v1/chat/completions (DeepSeek's Chat Completions, recipe §3.1).
void handle_chat_completions(const HandlerContext& context, const HttpRequest& request,
                             HttpResponse& response, Clock::time_point arrival);
// POST /v1/messages (Anthropic Messages, recipe §3.3).
void handle_messages(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                     Clock::time_point arrival);
// POST /v1/responses (OpenAI Responses, recipe §3.2): a body, or the typed response.* events.
void handle_responses(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                      Clock::time_point arrival);
// POST /v1/completions (legacy Completions: raw prompt text or token ids, logprobs, echo, n).
void handle_completions(const HandlerContext& context, const HttpRequest& request,
                        HttpResponse& response, Clock::time_point arrival);
// POST /tokenize (vLLM's: `prompt` text or chat `messages` -> count, max_model_len, tokens,
// token_strs) and POST /detokenize (`tokens` -> `prompt`).
void handle_tokenize(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                     Clock::time_point arrival);
void handle_detokenize(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                       Clock::time_point arrival);
// POST /v1/messages/count_tokens (Anthropic's: a Messages request without max_tokens -> input_tokens).
void handle_count_tokens(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                         Clock::time_point arrival);

}  // namespace deepinfer::server

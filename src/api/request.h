#pragma once
// Request bodies -> Conversation plus generation options, with DeepSeek's validation: a refused
// request throws ApiError (api_error.h) carrying the exact 400 message the official API or
// deepseek-recipe gives (tests/data/conformance/error_vectors.jsonl).
//
// The body must be parsed as nlohmann::ordered_json: tool schemas and tool-call arguments reach
// the prompt in the client's key order (recipe §1.5), which a sorted json would lose.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/conversation.h"
#include "api/output_constraint.h"
#include "engine/sampling_params.h"

namespace deepinfer::api {

struct GenerationOptions {
  std::string model;
  std::optional<int64_t> max_tokens;  // none: the server's default
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // Chat Completions stream_options.include_usage
  bool ignore_eos = false;     // vLLM's extension: generate max_tokens tokens, past EOS
  engine::SamplingParams sampling;
  // Structured output (response_format json_schema / json_object, structured_outputs, regex,
  // ebnf): compiled by the server with the tokenizer into sampling.constraint.
  std::optional<ConstraintSpec> constraint;
};

struct ApiRequest {
  Conversation conversation;
  GenerationOptions options;
};

// POST /chat/completions (recipe §3.1), including `prefix: true` on the last assistant message.
ApiRequest parse_chat_completions_request(const nlohmann::ordered_json& body);
// POST /messages, Anthropic Messages (recipe §3.3).
ApiRequest parse_messages_request(const nlohmann::ordered_json& body);
// POST /responses, OpenAI Responses (recipe §3.2).
ApiRequest parse_responses_request(const nlohmann::ordered_json& body);

}  // namespace deepinfer::api

#pragma once
// Shared by the api tests: the bundled V4.1 tokenizer (loaded once) and request helpers.
#include <string>

#include <nlohmann/json.hpp>

#include "api/prompt_renderer.h"
#include "api/prompt_tokens.h"
#include "api/request.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::api::testing {

inline const Tokenizer& v41_tokenizer() {
  static const Tokenizer tokenizer =
      Tokenizer::from_file(DEEPINFER_ASSET_DIR "/tokenizer/deepseek_v41_tokenizer.json");
  return tokenizer;
}

inline ApiRequest parse_request(const std::string& protocol, const nlohmann::ordered_json& body) {
  if (protocol == "chat_completions") return parse_chat_completions_request(body);
  if (protocol == "messages") return parse_messages_request(body);
  if (protocol == "responses") return parse_responses_request(body);
  throw std::runtime_error("unknown protocol " + protocol);
}

// Chat Completions body -> prompt string.
inline std::string chat_prompt(const std::string& body, PromptFormat format = PromptFormat::V41) {
  return render_prompt(parse_chat_completions_request(nlohmann::ordered_json::parse(body)).conversation, format)
      .text();
}

}  // namespace deepinfer::api::testing

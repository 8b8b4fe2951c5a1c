// Request JSON -> conversation -> V4.1 and V4 prompts and ids, through each of the three adapters
// (the first byte picks one). Refusals (ApiError, deepinfer::Error) are fine; anything else that
// escapes, and any sanitizer report, is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "api/prompt_renderer.h"
#include "api/prompt_tokens.h"
#include "api/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace deepinfer;
  static const api::PromptEncoder encoder(
      Tokenizer::from_file(DEEPINFER_ASSET_DIR "/tokenizer/deepseek_v41_tokenizer.json"), api::PromptFormat::V41);
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  try {
    api::ApiRequest request;
    switch (data[0] % 3) {
      case 0: request = api::parse_chat_completions_request(body); break;
      case 1: request = api::parse_messages_request(body); break;
      default: request = api::parse_responses_request(body); break;
    }
    const api::RenderedPrompt v41 = api::render_prompt(request.conversation, api::PromptFormat::V41);
    (void)encoder.encode(v41);
    (void)api::render_prompt(request.conversation, api::PromptFormat::V4).text();
  } catch (const api::ApiError&) {
  } catch (const Error&) {
  }
  return 0;
}

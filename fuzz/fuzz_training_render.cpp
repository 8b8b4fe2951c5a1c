// A training / perplexity line (a Chat Completions body whose last message is the answer) ->
// the whole conversation's ids and the answer's start, in the V4.1 or V4 format (the first byte
// picks one). Refusals (ApiError, deepinfer::Error) are fine; anything else that escapes, a
// result whose answer_start is outside its ids, and any sanitizer report, is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "api/training_render.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace deepinfer;
  static const Tokenizer tokenizer = Tokenizer::from_file(DEEPINFER_ASSET_DIR "/tokenizer/deepseek_v41_tokenizer.json");
  static const api::PromptEncoder v41(tokenizer, api::PromptFormat::V41);
  static const api::PromptEncoder v4(tokenizer, api::PromptFormat::V4);
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  const bool use_v4 = data[0] % 2 == 1;
  try {
    const api::TrainingRender r = api::render_training(use_v4 ? v4 : v41, use_v4 ? api::PromptFormat::V4 : api::PromptFormat::V41,
                                                       body, "fuzz line");
    if (r.answer_start == 0 || r.answer_start >= r.ids.size()) std::abort();
  } catch (const api::ApiError&) {
  } catch (const Error&) {
  }
  return 0;
}

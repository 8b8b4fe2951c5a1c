// POST /v1/completions body JSON -> CompletionsRequest (prompt text or ids, stop, logit_bias,
// logprobs, echo, n, ...), then the engine's sampling checks the handler runs next. Refusals
// (ApiError, deepinfer::Error) are fine; anything else that escapes, and any sanitizer report, is
// a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "core/error.h"
#include "engine/sampling_params.h"
#include "server/completions_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace deepinfer;
  static const Tokenizer tokenizer = Tokenizer::from_file(DEEPINFER_ASSET_DIR "/tokenizer/deepseek_v41_tokenizer.json");
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::ordered_json body = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return 0;
  try {
    const server::CompletionsRequest request = server::parse_completions_request(body, tokenizer);
    engine::validate(request.options.sampling, static_cast<int64_t>(tokenizer.vocab_size()));
  } catch (const api::ApiError&) {
  } catch (const Error&) {
  }
  return 0;
}

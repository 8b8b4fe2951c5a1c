// What the data-parallel front reads from a request before routing it (server/routing_prompt.h):
// any body on any generation path. It must never throw (a body the rank refuses has no prompt).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/routing_prompt.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace deepinfer;
  static const api::PromptEncoder encoder(
      Tokenizer::from_file(DEEPINFER_ASSET_DIR "/tokenizer/deepseek_v41_tokenizer.json"), api::PromptFormat::V41);
  static const char* const kPaths[] = {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses",
                                       "/tokenize"};
  if (size == 0) return 0;
  server::HttpRequest request;
  request.method = "POST";
  request.path = kPaths[data[0] % 5];
  request.body.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    (void)server::routing_request(request, encoder, api::PromptFormat::V41);
  } catch (...) {
    std::abort();  // documented never to throw
  }
  return 0;
}

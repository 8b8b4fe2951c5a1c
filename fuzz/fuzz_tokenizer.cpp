// Encodes arbitrary bytes with the bundled V4.1 tokenizer and checks that decoding gives back the
// input's lossy UTF-8 form (true for this tokenizer: no normalizer, lossless byte-level BPE, added
// tokens decode to their own text) and that streaming decode agrees with decode.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "io/tokenizer/tokenizer.h"
#include "io/tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const deepinfer::Tokenizer tokenizer =
      deepinfer::Tokenizer::from_file(DEEPINFER_ASSET_DIR "/tokenizer/deepseek_v41_tokenizer.json");
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::vector<deepinfer::TokenId> ids = tokenizer.encode(input);
  const std::string decoded = tokenizer.decode(ids);
  if (decoded != deepinfer::tokenizer::utf8_lossy(input)) std::abort();
  for (const bool skip : {false, true}) {
    deepinfer::IncrementalDetokenizer stream(tokenizer, skip);
    std::string streamed;
    for (const deepinfer::TokenId id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    if (streamed != tokenizer.decode(ids, skip)) std::abort();
  }
  return 0;
}

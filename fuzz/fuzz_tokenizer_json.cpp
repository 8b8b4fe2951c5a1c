// Tokenizer::from_json on arbitrary input must load or throw deepinfer::Error, nothing else; a
// tokenizer that loads must encode and decode a few strings without crashing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const deepinfer::Tokenizer tokenizer = deepinfer::Tokenizer::from_json(json, "fuzz.json");
    for (const std::string_view text : {"hello world", "a <s> b\n\n  12345", "\xE4\xBD\xA0\xFF"}) {
      const auto ids = tokenizer.encode(text);
      (void)tokenizer.decode(ids, false);
      (void)tokenizer.decode(ids, true);
    }
  } catch (const deepinfer::Error&) {
  }
  return 0;
}

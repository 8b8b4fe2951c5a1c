// Arbitrary bytes -> JSON -> a JSON schema compiled, then its matcher run over the input's own
// serialisation (a schema is also a JSON instance of something) and a mask walk. A schema compiles
// or is refused with CompileError within the limits; nothing else may escape.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json schema = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return 0;
  deepinfer::grammar::CompileLimits limits;
  limits.max_symbols = 1 << 16;
  limits.max_repeat = 64;
  deepinfer::grammar::Grammar grammar;
  try {
    grammar = deepinfer::grammar::compile_json_schema(schema, {}, limits);
  } catch (const deepinfer::grammar::CompileError&) {
    return 0;
  }
  auto vocabulary = std::make_shared<const deepinfer::grammar::Vocabulary>(
      std::vector<std::string>{"{", "}", "\"", ":", ",", " ", "0", "1", "true", "null", "\"a\"", "["}, std::vector<int32_t>{},
      -1);
  deepinfer::grammar::Matcher matcher(deepinfer::grammar::prepare(std::move(grammar)), vocabulary);
  (void)matcher.accept_bytes(schema.dump().substr(0, 512));
  std::vector<uint64_t> mask(1);
  matcher.fill_mask(mask);
  (void)matcher.forced_bytes();
  return 0;
}

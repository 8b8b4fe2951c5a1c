// Arbitrary bytes -> JSON -> ModelConfig -> expected tensors. A config either parses or is rejected
// with deepinfer::Error; nothing else may escape, and a parsed config's schema must be buildable
// within the parser's sanity caps.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/checkpoint_schema.h"
#include "io/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json document = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return 0;
  try {
    deepinfer::ModelConfig config = deepinfer::parse_model_config(document, "fuzz");
    auto tensors = deepinfer::expected_tensors(config);
    // Exercise the derived helpers and the summary on every layer.
    for (int64_t layer = 0; layer < config.total_layers(); ++layer) {
      (void)config.attention_kind(layer);
      (void)config.kv_source_of(layer);
      (void)config.index_source_of(layer);
    }
    (void)deepinfer::describe(config);
    for (const auto& tensor : tensors) {
      for (int64_t d : tensor.stored_shape)
        if (d <= 0) std::abort();  // every expected tensor must have a real shape
    }
  } catch (const deepinfer::Error&) {
  }
  return 0;
}

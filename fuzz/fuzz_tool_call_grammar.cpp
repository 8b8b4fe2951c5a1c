// Arbitrary bytes -> JSON -> a strict tool's parameters -> the DSML tool-call grammar
// (api/tool_call_grammar.h, which compiles each parameter with compile_json_schema_split), then
// its matcher over a call spelled from the input and a mask walk. The grammar is built or the
// schema refused with a 400 ApiError; nothing else may escape.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/api_error.h"
#include "api/tool_call_grammar.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::ordered_json parameters = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parameters.is_discarded()) return 0;
  deepinfer::api::ToolCallSpec spec;
  spec.mode = size % 2 ? deepinfer::api::ToolCallSpec::Mode::Forced : deepinfer::api::ToolCallSpec::Mode::Optional;
  spec.tools.push_back({"f", parameters, /*strict=*/size % 3 != 0, /*constrained=*/true, "tools.0.function.parameters"});
  spec.tools.push_back({"g", nullptr, false, /*constrained=*/size % 5 != 0, "tools.1.function.parameters"});
  deepinfer::grammar::Grammar grammar;
  try {
    grammar = deepinfer::api::tool_call_grammar(spec, nullptr);
  } catch (const deepinfer::api::ApiError& error) {
    if (error.status() != 400) __builtin_trap();
    return 0;
  }
  auto vocabulary = std::make_shared<const deepinfer::grammar::Vocabulary>(
      std::vector<std::string>{"<｜DSML｜", " invoke", " name=\"", "f", "\">\n", "\n", "</｜DSML｜", " parameter", "\"", "true",
                               "false", "{", "}", "1", " calls>"},
      std::vector<int32_t>{}, -1);
  deepinfer::grammar::Matcher matcher(deepinfer::grammar::prepare(std::move(grammar)), vocabulary);
  std::string call = "<｜DSML｜ invoke name=\"f\">\n";
  if (parameters.is_object())
    for (const auto& [key, value] : parameters.items())
      call += "<｜DSML｜ parameter name=\"" + key + "\" string=\"false\">" + value.dump() + "</｜DSML｜ parameter>\n";
  (void)matcher.accept_bytes(call.substr(0, 1024));
  std::vector<uint64_t> mask(1);
  matcher.fill_mask(mask);
  (void)matcher.forced_bytes();
  return 0;
}

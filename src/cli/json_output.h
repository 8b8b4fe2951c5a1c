#pragma once
// JSON printed by the subcommands: UTF-8 as is (not \u escapes), invalid bytes replaced.
#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer::cli {

inline std::string utf8_json(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace deepinfer::cli

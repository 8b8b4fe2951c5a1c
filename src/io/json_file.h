#pragma once
// JSON documents read from disk, with parse errors that name the file, line and column.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace deepinfer {

nlohmann::json parse_json(std::string_view text, std::string_view origin);
nlohmann::json read_json_file(const std::string& path);

}  // namespace deepinfer

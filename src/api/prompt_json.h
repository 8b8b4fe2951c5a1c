#pragma once
// JSON as Python's json.dumps(value, ensure_ascii=False) writes it, which is how DeepSeek's encoder
// shows tool schemas and tool-call arguments to the model (recipe §1.5): ", " and ": " separators,
// non-ASCII kept, key order kept, floats in Python's repr (1e-05, 1e+16, 100000.0).
#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer::api {

std::string python_json(const nlohmann::ordered_json& value);

}  // namespace deepinfer::api

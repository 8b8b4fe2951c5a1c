#include "api/prompt_json.h"

namespace deepinfer::api {
namespace {

void append_python_json(const nlohmann::ordered_json& value, std::string& out) {
  if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      if (!first) out += ", ";
      first = false;
      append_python_json(nlohmann::ordered_json(key), out);
      out += ": ";
      append_python_json(item, out);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    bool first = true;
    for (const auto& item : value) {
      if (!first) out += ", ";
      first = false;
      append_python_json(item, out);
    }
    out += ']';
  } else {
    // Scalars: nlohmann's escaping with ensure_ascii off matches Python's (\" \\ \n \r \t \b \f,
    // \u00XX for other control characters), and its shortest round-trip float format switches to
    // exponents at the same points as Python's repr. Invalid UTF-8 cannot come from a parsed
    // request, but is replaced rather than thrown on to keep this total.
    out += value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value) {
  std::string out;
  append_python_json(value, out);
  return out;
}

}  // namespace deepinfer::api

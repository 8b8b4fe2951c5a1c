#include "io/json_file.h"

#include "core/error.h"
#include "core/mapped_file.h"

namespace deepinfer {

nlohmann::json parse_json(std::string_view text, std::string_view origin) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(origin, ": invalid JSON at byte ", e.byte, ": ", e.what());
  } catch (const nlohmann::json::exception& e) {  // out_of_range for numbers beyond double, e.g. 1e400
    fail(origin, ": invalid JSON: ", e.what());
  }
}

nlohmann::json read_json_file(const std::string& path) { return parse_json(read_text_file(path), path); }

}  // namespace deepinfer

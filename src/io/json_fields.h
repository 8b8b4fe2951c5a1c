#pragma once
// Typed reads of one JSON object's fields whose errors name the file, the field's JSON path, and
// (for a wrong type) what was expected and what was found. Never lets a nlohmann exception escape.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer {

class JsonFields {
 public:
  // `object` must outlive this reader; `path_prefix` is "" or e.g. "text_config.".
  JsonFields(const nlohmann::json& object, std::string origin, std::string path_prefix);

  bool has(std::string_view key) const;
  // The JSON path of `key`, e.g. "text_config.hidden_size".
  std::string path(std::string_view key) const;
  const std::string& origin() const { return origin_; }

  // Nested object; nullopt when absent or null.
  std::optional<JsonFields> object(std::string_view key) const;

  std::optional<int64_t> integer(std::string_view key, int64_t min, int64_t max) const;
  std::optional<double> number(std::string_view key, double min, double max) const;
  std::optional<bool> boolean(std::string_view key) const;
  std::optional<std::string> string(std::string_view key) const;
  std::optional<std::vector<int64_t>> integers(std::string_view key, int64_t min, int64_t max) const;
  std::optional<std::vector<std::string>> strings(std::string_view key) const;
  std::optional<std::vector<double>> numbers(std::string_view key, double min, double max) const;
  // An integer or a list of integers (eos_token_id).
  std::optional<std::vector<int64_t>> integer_or_integers(std::string_view key, int64_t min, int64_t max) const;

  int64_t required_integer(std::string_view key, int64_t min, int64_t max) const;
  double required_number(std::string_view key, double min, double max) const;

  [[noreturn]] void fail_missing(std::string_view key) const;
  [[noreturn]] void fail_field(std::string_view key, const std::string& message) const;

 private:
  const nlohmann::json* find(std::string_view key) const;
  [[noreturn]] void fail_type(std::string_view key, std::string_view expected, const nlohmann::json& value) const;
  int64_t integer_value(std::string_view key, const nlohmann::json& value, int64_t min, int64_t max) const;

  const nlohmann::json* object_;
  std::string origin_;
  std::string prefix_;
};

}  // namespace deepinfer

#include "io/json_fields.h"

#include <cmath>

#include "core/error.h"

namespace deepinfer {

namespace {

std::string describe_value(const nlohmann::json& value) {
  if (value.is_number_float()) return "a non-integral number";
  return str_cat("a JSON ", value.type_name());
}

}  // namespace

JsonFields::JsonFields(const nlohmann::json& object, std::string origin, std::string path_prefix)
    : object_(&object), origin_(std::move(origin)), prefix_(std::move(path_prefix)) {}

const nlohmann::json* JsonFields::find(std::string_view key) const {
  if (!object_->is_object()) return nullptr;
  auto it = object_->find(std::string(key));
  if (it == object_->end() || it->is_null()) return nullptr;  // null reads as "not given"
  return &*it;
}

bool JsonFields::has(std::string_view key) const { return find(key) != nullptr; }

std::string JsonFields::path(std::string_view key) const { return str_cat(prefix_, key); }

void JsonFields::fail_missing(std::string_view key) const {
  fail(origin_, ": required field `", path(key), "` is missing");
}

void JsonFields::fail_field(std::string_view key, const std::string& message) const {
  fail(origin_, ": field `", path(key), "` ", message);
}

void JsonFields::fail_type(std::string_view key, std::string_view expected, const nlohmann::json& value) const {
  fail_field(key, str_cat("must be ", expected, ", got ", describe_value(value)));
}

std::optional<JsonFields> JsonFields::object(std::string_view key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_object()) fail_type(key, "an object", *value);
  return JsonFields(*value, origin_, str_cat(prefix_, key, "."));
}

int64_t JsonFields::integer_value(std::string_view key, const nlohmann::json& value, int64_t min,
                                  int64_t max) const {
  int64_t result = 0;
  if (value.is_number_unsigned()) {
    uint64_t raw = value.get<uint64_t>();
    if (raw > static_cast<uint64_t>(max)) fail_field(key, str_cat("= ", raw, " is above the maximum ", max));
    result = static_cast<int64_t>(raw);
  } else if (value.is_number_integer()) {
    result = value.get<int64_t>();
  } else if (value.is_number_float()) {
    // transformers writes some integers as floats (e.g. 65536.0); accept exact integral values only.
    double raw = value.get<double>();
    if (!std::isfinite(raw) || raw != std::floor(raw)) fail_type(key, "an integer", value);
    // Compare against 2^63 before converting: converting an out-of-range double is undefined.
    if (raw < static_cast<double>(min) || raw > static_cast<double>(max) || raw >= 0x1p63 || raw < -0x1p63)
      fail_field(key, str_cat("= ", raw, " is outside [", min, ", ", max, "]"));
    result = static_cast<int64_t>(raw);
  } else {
    fail_type(key, "an integer", value);
  }
  if (result < min || result > max) fail_field(key, str_cat("= ", result, " is outside [", min, ", ", max, "]"));
  return result;
}

std::optional<int64_t> JsonFields::integer(std::string_view key, int64_t min, int64_t max) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  return integer_value(key, *value, min, max);
}

int64_t JsonFields::required_integer(std::string_view key, int64_t min, int64_t max) const {
  auto value = integer(key, min, max);
  if (!value) fail_missing(key);
  return *value;
}

std::optional<double> JsonFields::number(std::string_view key, double min, double max) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) fail_type(key, "a number", *value);
  double result = value->get<double>();
  if (!(result >= min && result <= max)) fail_field(key, str_cat("= ", result, " is outside [", min, ", ", max, "]"));
  return result;
}

double JsonFields::required_number(std::string_view key, double min, double max) const {
  auto value = number(key, min, max);
  if (!value) fail_missing(key);
  return *value;
}

std::optional<bool> JsonFields::boolean(std::string_view key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) fail_type(key, "a boolean", *value);
  return value->get<bool>();
}

std::optional<std::string> JsonFields::string(std::string_view key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) fail_type(key, "a string", *value);
  return value->get<std::string>();
}

std::optional<std::vector<int64_t>> JsonFields::integers(std::string_view key, int64_t min, int64_t max) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array()) fail_type(key, "an array of integers", *value);
  std::vector<int64_t> result;
  result.reserve(value->size());
  for (size_t i = 0; i < value->size(); ++i) {
    const nlohmann::json& element = (*value)[i];
    if (element.is_null()) fail_type(str_cat(key, "[", i, "]"), "an integer", element);
    result.push_back(integer_value(str_cat(key, "[", i, "]"), element, min, max));
  }
  return result;
}

std::optional<std::vector<double>> JsonFields::numbers(std::string_view key, double min, double max) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array()) fail_type(key, "an array of numbers", *value);
  std::vector<double> result;
  result.reserve(value->size());
  for (size_t i = 0; i < value->size(); ++i) {
    const nlohmann::json& element = (*value)[i];
    const std::string element_key = str_cat(key, "[", i, "]");
    if (!element.is_number()) fail_type(element_key, "a number", element);
    const double number = element.get<double>();
    if (!(number >= min && number <= max))
      fail_field(element_key, str_cat("= ", number, " is outside [", min, ", ", max, "]"));
    result.push_back(number);
  }
  return result;
}

std::optional<std::vector<std::string>> JsonFields::strings(std::string_view key) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_array()) fail_type(key, "an array of strings", *value);
  std::vector<std::string> result;
  result.reserve(value->size());
  for (size_t i = 0; i < value->size(); ++i) {
    const nlohmann::json& element = (*value)[i];
    if (!element.is_string()) fail_type(str_cat(key, "[", i, "]"), "a string", element);
    result.push_back(element.get<std::string>());
  }
  return result;
}

std::optional<std::vector<int64_t>> JsonFields::integer_or_integers(std::string_view key, int64_t min,
                                                                    int64_t max) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_array()) return integers(key, min, max);
  return std::vector<int64_t>{integer_value(key, *value, min, max)};
}

}  // namespace deepinfer

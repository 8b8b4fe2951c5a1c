#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer {
namespace {

using nlohmann::json;

constexpr std::size_t kLengthFieldBytes = 8;
// Same limit as the reference implementation (MAX_HEADER_SIZE): no file it writes or reads has a
// larger header, so a bigger length field is corruption, and honouring it would mean parsing and
// holding gigabytes of JSON before noticing. Real headers are a few megabytes at most.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr std::string_view kMetadataKey = "__metadata__";

std::uint64_t read_u64_le(const std::byte* bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < 8; ++i) value |= std::to_integer<std::uint64_t>(bytes[i]) << (8 * i);
  return value;
}

std::string describe_entry(std::string_view key) {
  return key == kMetadataKey ? std::string(kMetadataKey) : str_cat("tensor '", key, "'");
}

struct Header {
  json root;
  std::vector<std::string> keys_in_file_order;  // nlohmann's object is a sorted map
};

// nlohmann silently keeps the last of two equal keys, which would hide a tensor; the parse callback
// sees every key, so duplicates among tensors (depth 1) and within one entry (depth 2) are caught.
Header parse_header_json(std::string_view text, const std::string& origin) {
  Header header;
  std::unordered_set<std::string> top_level_keys;
  std::unordered_set<std::string> entry_keys;
  std::string current_entry;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start && depth == 1) {
      entry_keys.clear();
    } else if (event == json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (depth == 1) {
        if (!top_level_keys.insert(key).second) fail(origin, ": ", describe_entry(key), " appears twice in the header");
        header.keys_in_file_order.push_back(key);
        current_entry = key;
      } else if (depth == 2 && !entry_keys.insert(key).second) {
        fail(origin, ": ", describe_entry(current_entry), ": key \"", key, "\" appears twice");
      }
    }
    return true;
  };
  try {
    header.root = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::parse_error& e) {
    fail(origin, ": header is not valid JSON (at header byte ", e.byte, "): ", e.what());
  } catch (const json::exception& e) {  // out_of_range for numbers beyond double, e.g. 1e400
    fail(origin, ": header is not valid JSON: ", e.what());
  }
  if (!header.root.is_object()) fail(origin, ": header is a JSON ", header.root.type_name(), ", expected an object");
  return header;
}

// Shape dims and offsets: JSON numbers that must be whole and non-negative. nlohmann reads
// integers beyond uint64 as doubles, so those land in the "not an integer" branch.
std::uint64_t require_non_negative_integer(const json& value, const std::string& where) {
  if (value.is_number_unsigned()) return value.get<std::uint64_t>();
  if (value.is_number_integer()) {
    const auto signed_value = value.get<std::int64_t>();
    if (signed_value < 0) fail(where, " is negative (", signed_value, ")");
    return static_cast<std::uint64_t>(signed_value);
  }
  if (value.is_number_float()) fail(where, " is not an integer (", value.dump(), ")");
  fail(where, " is a JSON ", value.type_name(), ", expected a non-negative integer");
}

const json& require_field(const json& entry, const char* field, const std::string& where) {
  auto it = entry.find(field);
  if (it == entry.end()) fail(where, "missing \"", field, "\"");
  return *it;
}

TensorInfo parse_tensor_entry(const std::string& name, const json& entry, std::size_t data_region_bytes,
                              const std::string& origin) {
  const std::string where = str_cat(origin, ": tensor '", name, "': ");
  if (!entry.is_object())
    fail(where, "entry is a JSON ", entry.type_name(), ", expected an object with dtype, shape and data_offsets");
  TensorInfo tensor;
  tensor.name = name;

  const json& dtype = require_field(entry, "dtype", where);
  if (!dtype.is_string()) fail(where, "\"dtype\" is a JSON ", dtype.type_name(), ", expected a string");
  auto parsed_dtype = dtype_from_name(dtype.get_ref<const std::string&>());
  if (!parsed_dtype) fail(where, "unknown dtype \"", dtype.get_ref<const std::string&>(), "\"");
  tensor.dtype = *parsed_dtype;

  const json& shape = require_field(entry, "shape", where);
  if (!shape.is_array()) fail(where, "\"shape\" is a JSON ", shape.type_name(), ", expected an array");
  // Checked in the order TensorView::numel multiplies, so no view can overflow there either.
  std::int64_t numel = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::string dim_where = str_cat(where, "shape[", i, "]");
    const std::uint64_t dim = require_non_negative_integer(shape[i], dim_where);
    if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(dim_where, " = ", dim, " does not fit in int64");
    tensor.shape.push_back(static_cast<std::int64_t>(dim));
    if (__builtin_mul_overflow(numel, tensor.shape.back(), &numel))
      fail(where, "element count of shape ", shape_string(tensor.shape), "... overflows int64");
  }
  std::uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(numel), dtype_size(tensor.dtype), &expected_bytes))
    fail(where, "byte count of ", dtype_name(tensor.dtype), " shape ", shape_string(tensor.shape), " overflows");

  const json& offsets = require_field(entry, "data_offsets", where);
  if (!offsets.is_array() || offsets.size() != 2)
    fail(where, "\"data_offsets\" must be an array of two integers [begin, end], got ",
         offsets.is_array() ? str_cat(offsets.size(), " elements") : str_cat("a JSON ", offsets.type_name()));
  const std::uint64_t begin = require_non_negative_integer(offsets[0], where + "data_offsets[0]");
  const std::uint64_t end = require_non_negative_integer(offsets[1], where + "data_offsets[1]");
  if (begin > end) fail(where, "data_offsets [", begin, ", ", end, "] begin after end");
  if (end > data_region_bytes)
    fail(where, "data_offsets [", begin, ", ", end, "] end beyond the data region of ", data_region_bytes, " bytes");
  if (end - begin != expected_bytes)
    fail(where, "data_offsets [", begin, ", ", end, "] hold ", end - begin, " bytes but ", dtype_name(tensor.dtype),
         " shape ", shape_string(tensor.shape), " needs ", expected_bytes, " bytes");
  tensor.begin = static_cast<std::size_t>(begin);
  tensor.end = static_cast<std::size_t>(end);
  return tensor;
}

std::map<std::string, std::string> parse_metadata(const json& metadata, const std::string& origin) {
  if (!metadata.is_object())
    fail(origin, ": ", kMetadataKey, " is a JSON ", metadata.type_name(), ", expected an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : metadata.items()) {
    if (!value.is_string())
      fail(origin, ": ", kMetadataKey, " value of \"", key, "\" is a JSON ", value.type_name(), ", expected a string");
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// The reference implementation requires the tensors, sorted by offset, to tile the data region:
// each begins where the previous ended and the last ends at the end of the file. We follow it
// rather than allowing gaps: a gap or tail is never written by any safetensors writer, so it means a
// truncated or hand-edited file, and a file we accepted but HF rejected would only move the failure.
void check_layout(const std::vector<TensorInfo>& tensors, std::size_t data_region_bytes, const std::string& origin) {
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const auto& tensor : tensors) by_offset.push_back(&tensor);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  const TensorInfo* previous = nullptr;
  std::size_t covered = 0;
  for (const TensorInfo* tensor : by_offset) {
    if (tensor->begin < covered)
      fail(origin, ": tensors '", previous->name, "' [", previous->begin, ", ", previous->end, ") and '", tensor->name,
           "' [", tensor->begin, ", ", tensor->end, ") overlap");
    if (tensor->begin > covered)
      fail(origin, ": ", tensor->begin - covered, " unused bytes before tensor '", tensor->name, "' (data_offsets begin ",
           tensor->begin, ", ",
           previous ? str_cat("previous tensor '", previous->name, "' ends at ", covered) : std::string("data starts at 0"),
           "); safetensors requires tensors to be packed without gaps");
    covered = tensor->end;
    previous = tensor;
  }
  if (covered != data_region_bytes)
    fail(origin, ": ", data_region_bytes - covered, " unused bytes after ",
         previous ? str_cat("the last tensor '", previous->name, "'") : std::string("the header (no tensors)"),
         "; the data region must end where the last tensor ends (truncated or appended-to file?)");
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  MappedFile mapping(path);
  const auto bytes = mapping.bytes();  // stays valid: moving a MappedFile keeps the mapping's address
  SafetensorsFile file = parse(bytes, path);
  file.mapping_.emplace(std::move(mapping));
  return file;
}

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> bytes, std::string origin) {
  SafetensorsFile file;
  file.path_ = std::move(origin);
  const std::string& where = file.path_;
  if (bytes.size() < kLengthFieldBytes)
    fail(where, ": file is ", bytes.size(), " bytes, shorter than the 8-byte header length field");
  const std::uint64_t header_bytes = read_u64_le(bytes.data());
  if (header_bytes > kMaxHeaderBytes)
    fail(where, ": header length ", header_bytes, " exceeds the ", kMaxHeaderBytes, "-byte limit (corrupt length field?)");
  const std::size_t after_length_field = bytes.size() - kLengthFieldBytes;
  if (header_bytes > after_length_field)
    fail(where, ": header length ", header_bytes, " exceeds the ", after_length_field,
         " bytes that follow the length field (truncated file?)");

  const auto header_text = bytes.subspan(kLengthFieldBytes, header_bytes);
  file.data_region_ = bytes.subspan(kLengthFieldBytes + header_bytes);
  Header header = parse_header_json(
      std::string_view(reinterpret_cast<const char*>(header_text.data()), header_text.size()), where);

  for (const std::string& key : header.keys_in_file_order) {
    const json& value = header.root.at(key);
    if (key == kMetadataKey) {
      file.metadata_ = parse_metadata(value, where);
      continue;
    }
    file.index_by_name_.emplace(key, file.tensors_.size());
    file.tensors_.push_back(parse_tensor_entry(key, value, file.data_region_.size(), where));
  }
  check_layout(file.tensors_, file.data_region_.size(), where);
  return file;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_by_name_.find(name);
  return it == index_by_name_.end() ? nullptr : &tensors_[it->second];
}

TensorView SafetensorsFile::view(std::string_view name) const {
  const TensorInfo* tensor = find(name);
  if (tensor == nullptr) fail(path_, ": no tensor named '", name, "'");
  return TensorView{tensor->dtype, tensor->shape, data_region_.subspan(tensor->begin, tensor->byte_size())};
}

}  // namespace deepinfer

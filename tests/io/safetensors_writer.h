#pragma once
// Builds .safetensors files for the io tests. It lives with the tests on purpose: the engine only
// ever reads checkpoints, so the library has no writer.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace deepinfer::test {

struct TensorSpec {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
};

// Distinct bytes per tensor (seeded by its name), so a view pointing at the wrong range is caught.
inline std::vector<std::byte> pattern_bytes(std::size_t count, std::string_view seed) {
  std::vector<std::byte> out(count);
  unsigned state = 17;
  for (char c : seed) state = state * 31 + static_cast<unsigned char>(c);
  for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<std::byte>((state + i * 7) & 0xff);
  return out;
}

// A tensor whose bytes match dtype and shape, filled with pattern_bytes.
inline TensorSpec tensor(std::string name, std::string dtype, std::vector<int64_t> shape) {
  std::size_t count = dtype_size(*dtype_from_name(dtype));
  for (int64_t dim : shape) count *= static_cast<std::size_t>(dim);
  auto data = pattern_bytes(count, name);
  return TensorSpec{std::move(name), std::move(dtype), std::move(shape), std::move(data)};
}

template <typename T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Length field + header text (as given, no padding) + data. For hand-made, possibly corrupt files.
inline std::vector<std::byte> raw_file(uint64_t length_field, std::string_view header_text,
                                       std::span<const std::byte> data = {}) {
  std::vector<std::byte> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((length_field >> (8 * i)) & 0xff));
  for (char c : header_text) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline std::vector<std::byte> raw_file(std::string_view header_text, std::size_t data_bytes = 0) {
  return raw_file(header_text.size(), header_text, pattern_bytes(data_bytes, "raw"));
}

// A valid file laid out like the reference writer: tensors packed in the given order (so header
// order and offset order agree unless the caller permutes), header space-padded to 8 bytes.
inline std::vector<std::byte> safetensors_file(const std::vector<TensorSpec>& tensors,
                                               const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<std::byte> data;
  for (const auto& spec : tensors) {
    header[spec.name] = {{"dtype", spec.dtype},
                         {"shape", spec.shape},
                         {"data_offsets", {data.size(), data.size() + spec.data.size()}}};
    data.insert(data.end(), spec.data.begin(), spec.data.end());
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  return raw_file(text.size(), text, data);
}

inline void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline void write_text(const std::filesystem::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// A fresh folder under the test temp dir, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "deepinfer_io_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

}  // namespace deepinfer::test

#pragma once
// One .safetensors file, memory-mapped and validated up front, so that every view handed out
// afterwards is known to lie inside the file: a corrupt or hostile checkpoint fails at open with an
// error naming the file and tensor, never later as a crash inside a kernel.
//
// Layout rules follow the reference implementation (huggingface/safetensors, Metadata::validate):
// tensors sorted by data_offsets must tile the data region exactly, with no gaps, overlaps or
// unused tail. Every file its writer produces passes, and anything we accept loads there too.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/tensor_view.h"

namespace deepinfer {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  // As stored: DeepSeek's packed FP4 weights are I8/U8 [out, in/2], and this is that shape.
  std::vector<int64_t> shape;
  // Byte range [begin, end) relative to the start of the data region (the header's data_offsets).
  std::size_t begin = 0;
  std::size_t end = 0;

  std::size_t byte_size() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps and validates the file; throws deepinfer::Error naming the path (and tensor) on any defect.
  static SafetensorsFile open(const std::string& path);
  // Validates bytes already in memory (tests, the fuzzer). The bytes must outlive the result;
  // origin stands in for the path in error messages.
  static SafetensorsFile parse(std::span<const std::byte> bytes, std::string origin);

  const std::string& path() const { return path_; }
  // In header order, so listings match what tools such as safetensors-cli print.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  // Points into the mapping (no copy); throws naming the file and tensor when there is no such
  // tensor. The bytes are aligned for the dtype only if the writer aligned them: the reference
  // writer pads the header to 8 bytes and orders tensors by alignment, so its files are.
  TensorView view(std::string_view name) const;
  // The header's "__metadata__" (e.g. {"format": "pt"}); empty when absent.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::optional<MappedFile> mapping_;  // absent for parse(): the caller owns the bytes
  std::span<const std::byte> data_region_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_by_name_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace deepinfer

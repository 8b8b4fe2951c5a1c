// Arbitrary bytes into the safetensors parser: each input must be accepted or rejected with
// deepinfer::Error. Any other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto file = deepinfer::SafetensorsFile::parse(bytes, "fuzz-input");
    // Touch the first and last byte of every view, so a range outside the input trips ASan.
    volatile std::byte sink{};
    for (const auto& tensor : file.tensors()) {
      const auto view = file.view(tensor.name);
      if (view.bytes.size() != tensor.byte_size()) __builtin_trap();
      if (!view.bytes.empty()) sink = view.bytes.front() ^ view.bytes.back();
    }
    (void)sink;
  } catch (const deepinfer::Error&) {
  }
  return 0;
}

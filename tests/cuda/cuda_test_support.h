#pragma once
// What the CUDA kernel tests share: the skip where no device answers, and device memory that
// frees itself, with uploads and downloads that fail the test loudly.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer::cuda_testing {

// Why no device can run the tests, or "" when one can.
inline std::string missing_device_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // do not leave the error for the next check
    return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
  }
  if (count == 0) return "cudaGetDeviceCount found none";
  return "";
}

#define DEEPINFER_REQUIRE_CUDA_DEVICE()                                                     \
  do {                                                                                      \
    const std::string deepinfer_missing_ = ::deepinfer::cuda_testing::missing_device_reason(); \
    if (!deepinfer_missing_.empty()) GTEST_SKIP() << "no CUDA device: " << deepinfer_missing_; \
  } while (0)

inline void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

// Waits for the kernels and fails on any error they left.
inline void synchronize() {
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cuda_check(cudaGetLastError(), "cudaGetLastError");
}

// cudaMalloc'd bytes, freed on destruction.
class DeviceBytes {
 public:
  DeviceBytes() = default;
  explicit DeviceBytes(std::size_t bytes) {
    if (bytes > 0) cuda_check(cudaMalloc(&pointer_, bytes), "cudaMalloc");
    size_ = bytes;
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  DeviceBytes(DeviceBytes&& other) noexcept
      : pointer_(std::exchange(other.pointer_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBytes& operator=(DeviceBytes&& other) noexcept {
    if (this != &other) {
      release();
      pointer_ = std::exchange(other.pointer_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~DeviceBytes() { release(); }

  void* get() const { return pointer_; }
  std::size_t size() const { return size_; }
  template <typename T>
  T* at(std::size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(pointer_) + byte_offset);
  }
  void upload(const void* source, std::size_t bytes, std::size_t byte_offset = 0) {
    if (byte_offset + bytes > size_) throw std::runtime_error("DeviceBytes::upload past the end");
    if (bytes > 0) cuda_check(cudaMemcpy(at<char>(byte_offset), source, bytes, cudaMemcpyHostToDevice), "upload");
  }
  void download(void* target, std::size_t bytes, std::size_t byte_offset = 0) const {
    if (byte_offset + bytes > size_) throw std::runtime_error("DeviceBytes::download past the end");
    if (bytes > 0) cuda_check(cudaMemcpy(target, at<char>(byte_offset), bytes, cudaMemcpyDeviceToHost), "download");
  }

 private:
  void release() {
    if (pointer_) (void)cudaFree(pointer_);
    pointer_ = nullptr;
    size_ = 0;
  }
  void* pointer_ = nullptr;
  std::size_t size_ = 0;
};

// A device copy of `values`, starting `byte_offset` bytes into its allocation (to test misaligned
// pointers); at<T>(byte_offset) is the copy.
template <typename T>
DeviceBytes to_device(const std::vector<T>& values, std::size_t byte_offset = 0) {
  DeviceBytes bytes(values.size() * sizeof(T) + byte_offset + 16);
  bytes.upload(values.data(), values.size() * sizeof(T), byte_offset);
  return bytes;
}

template <typename T>
std::vector<T> from_device(const T* device, std::size_t count) {
  std::vector<T> out(count);
  if (count > 0)
    cuda_check(cudaMemcpy(out.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost), "from_device");
  return out;
}

}  // namespace deepinfer::cuda_testing

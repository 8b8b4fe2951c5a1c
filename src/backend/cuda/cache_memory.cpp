#include "backend/cuda/cache_memory.h"

#include <cstdio>

#include "core/error.h"

namespace deepinfer::backend::cuda {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(status));
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

}  // namespace

std::shared_ptr<std::byte> CudaCacheMemory::allocate(int64_t bytes, bool zeroed) const {
  if (bytes < 0) fail("cache memory: ", bytes, " bytes asked for");
  check(cudaSetDevice(device_), "cudaSetDevice");
  void* pointer = nullptr;
  const cudaError_t status = cudaMalloc(&pointer, static_cast<std::size_t>(bytes > 0 ? bytes : 1));
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // an out-of-memory must not poison the next launch
    std::size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    fail("cache memory on ", name_, ": ", mib(bytes), " do not fit (", mib(static_cast<int64_t>(free_bytes)),
         " free of ", mib(static_cast<int64_t>(total_bytes)), "): ", cudaGetErrorString(status),
         "; ask for less with --cache-memory");
  }
  if (zeroed) {
    const std::lock_guard<std::mutex> lock(pass_mutex_);
    check(cudaMemsetAsync(pointer, 0, static_cast<std::size_t>(bytes), stream_), "cudaMemsetAsync");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  const int device = device_;
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(pointer), [device](std::byte* p) {
    cudaSetDevice(device);
    cudaFree(p);
  });
}

void CudaCacheMemory::transfer(void* to, const void* from, int64_t bytes, cudaMemcpyKind kind) const {
  if (bytes <= 0) return;
  const std::lock_guard<std::mutex> lock(pass_mutex_);
  check(cudaMemcpyAsync(to, from, static_cast<std::size_t>(bytes), kind, stream_), "cudaMemcpyAsync");
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void CudaCacheMemory::copy(std::byte* to, const std::byte* from, int64_t bytes) const {
  transfer(to, from, bytes, cudaMemcpyDeviceToDevice);
}
void CudaCacheMemory::write(std::byte* to, const std::byte* host, int64_t bytes) const {
  transfer(to, host, bytes, cudaMemcpyHostToDevice);
}
void CudaCacheMemory::read(std::byte* host, const std::byte* from, int64_t bytes) const {
  transfer(host, from, bytes, cudaMemcpyDeviceToHost);
}

}  // namespace deepinfer::backend::cuda

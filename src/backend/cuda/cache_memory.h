#pragma once
// Cache blocks in device memory (model::CacheMemory): the engine's block pool, self-owned pages
// and the snapshots kept in pool blocks all live on the GPU the backend runs on, so attention
// reads its compressed entries where they were written and nothing crosses PCIe per step.
#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "model/paged_rows.h"

namespace deepinfer::backend::cuda {

class CudaCacheMemory final : public model::CacheMemory {
 public:
  // pass_mutex: the backend's, held by every forward pass (one at a time, on `stream`).
  CudaCacheMemory(int device, cudaStream_t stream, std::mutex& pass_mutex, std::string name)
      : device_(device), stream_(stream), pass_mutex_(pass_mutex), name_(std::move(name)) {}

  std::shared_ptr<std::byte> allocate(int64_t bytes, bool zeroed) const override;
  void copy(std::byte* to, const std::byte* from, int64_t bytes) const override;
  void write(std::byte* to, const std::byte* host, int64_t bytes) const override;
  void read(std::byte* host, const std::byte* from, int64_t bytes) const override;
  std::string name() const override { return name_; }

 private:
  void transfer(void* to, const void* from, int64_t bytes, cudaMemcpyKind kind) const;

  int device_;
  cudaStream_t stream_;  // the backend's: copies are ordered after the passes' kernels
  // A copy waits for the pass of another thread to end rather than land in it: a pass being
  // captured as a CUDA graph would take the copy into the graph (step_graphs.h).
  std::mutex& pass_mutex_;
  std::string name_;
};

}  // namespace deepinfer::backend::cuda

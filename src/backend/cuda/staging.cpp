#include "backend/cuda/staging.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer::backend::cuda {
namespace {

constexpr std::size_t kAlignment = 16;
constexpr std::size_t kChunkBytes = std::size_t{4} << 20;

void check(cudaError_t status, const char* what, std::size_t bytes) {
  if (status != cudaSuccess) fail("CUDA: ", what, " of ", bytes, " staging bytes: ", cudaGetErrorString(status));
}

}  // namespace

Staging::~Staging() {
  for (const Chunk& chunk : chunks_) {
    cudaFreeHost(chunk.host);
    cudaFree(chunk.device);
  }
}

void* Staging::put_bytes(const void* values, std::size_t bytes, cudaStream_t stream) {
  const std::size_t padded = std::max<std::size_t>((bytes + kAlignment - 1) / kAlignment * kAlignment, kAlignment);
  // The next chunk (existing or new) with room: the same sequence of puts lands at the same
  // addresses in every pass, whatever chunks later passes added.
  while (chunk_ < chunks_.size() && offset_ + padded > chunks_[chunk_].bytes) {
    ++chunk_;
    offset_ = 0;
  }
  if (chunk_ == chunks_.size()) {
    Chunk chunk;
    chunk.bytes = std::max(kChunkBytes, padded);
    check(cudaHostAlloc(reinterpret_cast<void**>(&chunk.host), chunk.bytes, cudaHostAllocDefault), "cudaHostAlloc",
          chunk.bytes);
    if (const cudaError_t status = cudaMalloc(reinterpret_cast<void**>(&chunk.device), chunk.bytes);
        status != cudaSuccess) {
      cudaFreeHost(chunk.host);
      check(status, "cudaMalloc", chunk.bytes);
    }
    chunks_.push_back(chunk);
    offset_ = 0;
  }
  written_.resize(chunks_.size(), 0);
  const Chunk& chunk = chunks_[chunk_];
  std::byte* host = chunk.host + offset_;
  std::byte* device = chunk.device + offset_;
  offset_ += padded;
  written_[chunk_] = offset_;
  if (bytes == 0) return device;
  std::memcpy(host, values, bytes);
  if (copying_) check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync", bytes);
  return device;
}

std::vector<Staging::Range> Staging::written() const {
  std::vector<Range> ranges;
  for (std::size_t i = 0; i < written_.size(); ++i)
    if (written_[i] > 0) ranges.push_back({chunks_[i].device, chunks_[i].host, written_[i]});
  return ranges;
}

}  // namespace deepinfer::backend::cuda

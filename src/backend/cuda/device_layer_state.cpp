#include "backend/cuda/device_layer_state.h"

#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"

namespace deepinfer::backend::cuda {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(status));
}

constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

DeviceCompressorRing ring_for(const model::CompressorWeights& weights) {
  DeviceCompressorRing ring;
  ring.ratio = weights.ratio;
  ring.width = weights.width();
  ring.overlap = weights.overlap;
  ring.capacity = weights.overlap ? 2 * weights.ratio : weights.ratio;
  return ring;
}

std::size_t ring_bytes(const DeviceCompressorRing& ring) {
  return 2 * aligned(static_cast<std::size_t>(ring.capacity * ring.width) * sizeof(float));
}

void place(DeviceCompressorRing& ring, std::byte*& cursor) {
  if (!ring.present()) return;
  const std::size_t half = aligned(static_cast<std::size_t>(ring.capacity * ring.width) * sizeof(float));
  ring.kv = reinterpret_cast<float*>(cursor);
  ring.gate = reinterpret_cast<float*>(cursor + half);
  cursor += 2 * half;
}

// A layer state's whole allocation built on the host and sent in one transfer (the inverse of
// StateImage): rebuilding the device state of a sequence whose snapshot was restored (a rejected
// draft's rollback, every few steps under speculative decoding) took one small pageable copy per
// row and compressor row, ~200 us a layer.
struct UploadImage {
  std::byte* device_base = nullptr;
  std::vector<std::byte> bytes;
  std::byte* at(const void* device) { return bytes.data() + (static_cast<const std::byte*>(device) - device_base); }
};

// Host rows of positions [first, first + count) (each `width` floats, kv and gate) into the ring.
void upload_rows(const DeviceCompressorRing& ring, int64_t first, int64_t count, const float* kv, const float* gate,
                 UploadImage& image) {
  const auto row = static_cast<std::size_t>(ring.width) * sizeof(float);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t slot = (first + i) % ring.capacity;
    std::memcpy(image.at(ring.kv + slot * ring.width), kv + i * ring.width, row);
    std::memcpy(image.at(ring.gate + slot * ring.width), gate + i * ring.width, row);
  }
}

// A host copy of a layer state's whole allocation, read row by row: one transfer instead of one
// per row (a snapshot of a 4-layer state took hundreds of small copies, milliseconds, while the
// next step waited for the host).
struct StateImage {
  const std::byte* device_base = nullptr;
  std::vector<std::byte> bytes;
  const std::byte* at(const void* device) const {
    return bytes.data() + (static_cast<const std::byte*>(device) - device_base);
  }
};

// The ring's rows of positions [first, first + count), in order, into host vectors.
void download_rows(const DeviceCompressorRing& ring, int64_t first, int64_t count, std::vector<float>& kv,
                   std::vector<float>& gate, const StateImage& image) {
  const auto width = static_cast<std::size_t>(ring.width);
  kv.resize(static_cast<std::size_t>(count) * width);
  gate.resize(kv.size());
  for (int64_t i = 0; i < count; ++i) {
    const int64_t slot = (first + i) % ring.capacity;
    std::memcpy(kv.data() + i * ring.width, image.at(ring.kv + slot * ring.width), width * 4);
    std::memcpy(gate.data() + i * ring.width, image.at(ring.gate + slot * ring.width), width * 4);
  }
}

// A V4 compressor's host state (model/compressor.h) into its ring: the previous window (overlap)
// and the open rows.
void upload_compressor(DeviceCompressorRing& ring, const model::CompressorState& host, int64_t length,
                       UploadImage& image) {
  ring.entries = host.entries.size();
  const int64_t open_first = ring.entries * ring.ratio;
  const int64_t open = static_cast<int64_t>(host.open_kv.size()) / ring.width;
  if (open_first + open != length)
    fail("CUDA backend: a compressor holds ", ring.entries, " entries and ", open, " open rows at length ", length);
  upload_rows(ring, open_first, open, host.open_kv.data(), host.open_gate.data(), image);
  if (ring.overlap && ring.entries > 0) {
    if (static_cast<int64_t>(host.previous_kv.size()) != ring.ratio * ring.width)
      fail("CUDA backend: a compressor's previous window holds ", host.previous_kv.size(), " values");
    upload_rows(ring, open_first - ring.ratio, ring.ratio, host.previous_kv.data(), host.previous_gate.data(), image);
  }
}

void download_compressor(const DeviceCompressorRing& ring, int64_t length, model::CompressorState& host,
                         const StateImage& image) {
  const int64_t open_first = ring.entries * ring.ratio;
  download_rows(ring, open_first, length - open_first, host.open_kv, host.open_gate, image);
  if (ring.overlap && ring.entries > 0) {
    download_rows(ring, open_first - ring.ratio, ring.ratio, host.previous_kv, host.previous_gate, image);
  } else {
    host.previous_kv.clear();
    host.previous_gate.clear();
  }
  host.entries.set_size(ring.entries);
}

// The free lists of StateMemory, per device and size. Never freed: the buffers are reused for the
// process's life (and the CUDA context may be gone at static destruction).
struct StatePool {
  std::mutex mutex;
  std::map<std::pair<int, std::size_t>, std::vector<void*>> free;
};
StatePool& state_pool() {
  static auto* pool = new StatePool;
  return *pool;
}

int current_device() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

// Moves a ring's pointers from one allocation to another laid out the same.
void rebase(DeviceCompressorRing& ring, const std::byte* from, std::byte* to) {
  if (ring.kv) ring.kv = reinterpret_cast<float*>(to + (reinterpret_cast<const std::byte*>(ring.kv) - from));
  if (ring.gate) ring.gate = reinterpret_cast<float*>(to + (reinterpret_cast<const std::byte*>(ring.gate) - from));
}

}  // namespace

StateMemory::StateMemory(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  StatePool& pool = state_pool();
  {
    const std::lock_guard lock(pool.mutex);
    std::vector<void*>& free = pool.free[{current_device(), bytes}];
    if (!free.empty()) {
      data_ = free.back();
      free.pop_back();
      return;
    }
  }
  if (const cudaError_t status = cudaMalloc(&data_, bytes); status != cudaSuccess) {
    cudaGetLastError();
    data_ = nullptr;
    fail("CUDA: a layer state's ", bytes, " bytes: ", cudaGetErrorString(status));
  }
}

StateMemory::~StateMemory() {
  if (!data_) return;
  StatePool& pool = state_pool();
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return;  // the context is gone: nothing to keep
  const std::lock_guard lock(pool.mutex);
  pool.free[{device, bytes_}].push_back(data_);
}

StateMemory& StateMemory::operator=(StateMemory&& other) noexcept {
  if (this != &other) {
    StateMemory old(std::move(*this));  // back to the pool at the end of this scope
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

ReadyEvent::ReadyEvent() { check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"); }
ReadyEvent::~ReadyEvent() {
  if (event) cudaEventDestroy(event);
}

std::shared_ptr<DeviceLayerState> DeviceLayerState::frozen_copy(cudaStream_t stream,
                                                                std::shared_ptr<const ReadyEvent> ready) const {
  std::shared_ptr<DeviceLayerState> copy(new DeviceLayerState());
  copy->window_first = window_first;
  copy->length = length;
  copy->compressor = compressor;
  copy->indexer = indexer;
  copy->latent = latent;
  copy->window_capacity_ = window_capacity_;
  copy->window_row_bytes_ = window_row_bytes_;
  copy->memory_ = StateMemory(memory_.bytes());
  const auto* from = static_cast<const std::byte*>(memory_.data());
  auto* to = static_cast<std::byte*>(copy->memory_.data());
  if (memory_.bytes() > 0)
    check(cudaMemcpyAsync(to, from, memory_.bytes(), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
  copy->window_ring_ = window_ring_ ? to + (window_ring_ - from) : nullptr;
  rebase(copy->compressor, from, to);
  rebase(copy->indexer, from, to);
  rebase(copy->latent, from, to);
  copy->ready_ = std::move(ready);
  return copy;
}

DeviceLayerState::DeviceLayerState(const model::AttentionWeights& weights, const model::AttentionState& host,
                                   cudaStream_t stream) {
  window_capacity_ = weights.window;
  window_row_bytes_ = host.window.row_bytes();
  if (host.window.width() != weights.head_dim) fail("CUDA backend: attention state was not made for this layer");
  if (weights.compressor) compressor = ring_for(*weights.compressor);
  if (weights.indexer) indexer = ring_for(weights.indexer->compressor);
  if (weights.latent_compressor) {
    latent.ratio = weights.latent_compressor->ratio;
    latent.width = weights.latent_compressor->head_dim;
    latent.capacity = latent.ratio > 1 ? latent.ratio : 0;  // ratio 1: every row is its own entry
  }
  const std::size_t window_bytes = aligned(static_cast<std::size_t>(window_capacity_ * window_row_bytes_));
  memory_ = StateMemory(window_bytes + ring_bytes(compressor) + ring_bytes(indexer) + ring_bytes(latent));
  auto* cursor = static_cast<std::byte*>(memory_.data());
  window_ring_ = cursor;
  cursor += window_bytes;
  place(compressor, cursor);
  place(indexer, cursor);
  place(latent, cursor);

  // The host form: window rows as stored, then each compressor's rows.
  window_first = host.window_first;
  length = host.window_first + host.window.size();
  UploadImage image{static_cast<std::byte*>(memory_.data()), std::vector<std::byte>(memory_.bytes())};
  const std::span<const uint8_t> stored = host.window.stored();
  for (int64_t r = 0; r < host.window.size(); ++r) {
    const int64_t slot = (window_first + r) % window_capacity_;
    std::memcpy(image.at(window_ring_ + slot * window_row_bytes_), stored.data() + r * window_row_bytes_,
                static_cast<std::size_t>(window_row_bytes_));
  }
  if (compressor.present()) upload_compressor(compressor, host.compressor, length, image);
  if (indexer.present()) upload_compressor(indexer, host.indexer.compressor, length, image);
  if (weights.latent_compressor) {
    const model::LatentCompressorState& group = host.group.compressor;
    latent.entries = group.entry_count;
    const int64_t open = static_cast<int64_t>(group.open_kv.size()) / latent.width;
    if (latent.entries * latent.ratio + open != length)
      fail("CUDA backend: a kv source holds ", latent.entries, " entries and ", open, " open rows at length ", length);
    if (latent.present()) upload_rows(latent, latent.entries * latent.ratio, open, group.open_kv.data(),
                                      group.open_gate.data(), image);
  }
  if (!image.bytes.empty())
    check(cudaMemcpyAsync(memory_.data(), image.bytes.data(), image.bytes.size(), cudaMemcpyHostToDevice, stream),
          "upload");
  // The image is this call's: the copy must be done before it goes.
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void DeviceLayerState::to_host(model::AttentionState& host, cudaStream_t stream) const {
  StateImage image;
  image.device_base = static_cast<const std::byte*>(memory_.data());
  image.bytes.resize(memory_.bytes());
  if (!image.bytes.empty())
    check(cudaMemcpyAsync(image.bytes.data(), memory_.data(), image.bytes.size(), cudaMemcpyDeviceToHost, stream),
          "download");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  const int64_t rows = length - window_first;
  std::vector<uint8_t> stored(static_cast<std::size_t>(rows * window_row_bytes_));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t slot = (window_first + r) % window_capacity_;
    std::memcpy(stored.data() + r * window_row_bytes_, image.at(window_ring_ + slot * window_row_bytes_),
                static_cast<std::size_t>(window_row_bytes_));
  }
  if (compressor.present()) download_compressor(compressor, length, host.compressor, image);
  if (indexer.present()) download_compressor(indexer, length, host.indexer.compressor, image);
  model::CompressedGroupState& group = host.group;
  if (latent.ratio > 0) {
    group.compressor.entry_count = latent.entries;
    if (latent.present()) {
      const int64_t first = latent.entries * latent.ratio;
      download_rows(latent, first, length - first, group.compressor.open_kv, group.compressor.open_gate, image);
    } else {
      group.compressor.open_kv.clear();
      group.compressor.open_gate.clear();
    }
    group.entries.set_size(latent.entries);
    group.index_keys.set_size(latent.entries);
  }
  host.window.restore_stored(rows, stored);
  host.window_first = window_first;
}

DeviceLayerState& device_state(model::AttentionState& state, const model::AttentionWeights& weights,
                               cudaStream_t stream) {
  if (!state.backend) state.backend = std::make_shared<DeviceLayerState>(weights, state, stream);
  auto* device = dynamic_cast<DeviceLayerState*>(state.backend.get());
  if (!device) fail("CUDA backend: a layer's state belongs to another backend");
  return *device;
}

}  // namespace deepinfer::backend::cuda

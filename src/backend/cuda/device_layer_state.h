#pragma once
// One sequence's per-layer attention state in device memory (model::AttentionState::backend), the
// CUDA backend's copy of what model/attention.h keeps on the host: the sliding window's K = V rows
// in their stored format (a ring of `window` rows, position p at slot p % window), and the open
// rows of the layer's compressors (rings of kv and gate rows, kernels/cuda/attention_kernels.h
// CompressorRing). The paged entries and index keys are not here: they live in the sequence's
// cache blocks, which are device memory too (CudaCacheMemory).
//
// The host form moves in and out only for snapshots and forks (from_host / to_host), so a
// restored sequence continues bit for bit on either backend. A snapshot taken between two issued
// passes reads a frozen copy (frozen_copy), made on the stream behind the first pass.
//
// Layer states come and go with sequences, every few steps under load, and cudaFree waits for the
// whole device: it would stall the host behind a step issued ahead (chained steps). So their
// memory comes from a free list per size (StateMemory), kept for the process's life.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cuda/device_memory.h"
#include "kernels/cuda/attention_kernels.h"
#include "model/attention.h"

namespace deepinfer::backend::cuda {

// One compressor's open rows: positions [kept_from(), length) of the layer at slot p % capacity.
struct DeviceCompressorRing {
  int64_t ratio = 0;
  int64_t width = 0;     // kv / gate row width (2 d with overlap)
  int64_t capacity = 0;  // rows; 0: the layer has no such compressor
  bool overlap = false;  // V4 CSA: the last closed window is kept too
  int64_t entries = 0;   // entries closed so far
  float* kv = nullptr;   // [capacity, width], inside the state's one allocation
  float* gate = nullptr;

  bool present() const { return capacity > 0; }
  // The first position whose row the ring must hold once `entries` entries are closed.
  int64_t kept_from() const { return overlap && entries > 0 ? (entries - 1) * ratio : entries * ratio; }
  kernels::cuda::CompressorRing ring() const { return {kv, gate}; }
};

// Device memory from the free list of its size (see above); back to it when destroyed.
class StateMemory {
 public:
  StateMemory() = default;
  explicit StateMemory(std::size_t bytes);
  ~StateMemory();
  StateMemory(StateMemory&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  StateMemory& operator=(StateMemory&& other) noexcept;
  StateMemory(const StateMemory&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A CUDA event a frozen copy's reader waits for (the copies that made it).
struct ReadyEvent {
  ReadyEvent();
  ~ReadyEvent();
  ReadyEvent(const ReadyEvent&) = delete;
  ReadyEvent& operator=(const ReadyEvent&) = delete;
  cudaEvent_t event = nullptr;
};

class DeviceLayerState final : public model::BackendLayerState {
 public:
  // Sized for `weights`' layer; holds what `host` holds (a fresh state: nothing).
  DeviceLayerState(const model::AttentionWeights& weights, const model::AttentionState& host, cudaStream_t stream);

  // The host form of this state into `host` (window rows as stored, compressor rows, counts).
  void to_host(model::AttentionState& host, cudaStream_t stream) const;
  // A copy of this state as the work queued on `stream` so far leaves it, made by copies queued
  // there too; `ready` is to be recorded behind them, and a reader waits for it (ready()).
  std::shared_ptr<DeviceLayerState> frozen_copy(cudaStream_t stream, std::shared_ptr<const ReadyEvent> ready) const;
  const ReadyEvent* ready() const { return ready_.get(); }

  int64_t window_capacity() const { return window_capacity_; }
  int64_t window_row_bytes() const { return window_row_bytes_; }
  std::byte* window_ring() const { return window_ring_; }

  // Positions [window_first, length) are in the window ring; `length` is the next position.
  int64_t window_first = 0;
  int64_t length = 0;
  DeviceCompressorRing compressor;  // V4 ratio > 0 layers
  DeviceCompressorRing indexer;     // V4 CSA: the indexer's own compressor
  DeviceCompressorRing latent;      // V4.1 kv sources with ratio > 1

 private:
  DeviceLayerState() = default;
  StateMemory memory_;
  std::shared_ptr<const ReadyEvent> ready_;  // frozen copies only
  int64_t window_capacity_ = 0;
  int64_t window_row_bytes_ = 0;
  std::byte* window_ring_ = nullptr;
};

// The state of `state`'s layer on the device, made from its host form on first use.
DeviceLayerState& device_state(model::AttentionState& state, const model::AttentionWeights& weights,
                               cudaStream_t stream);

}  // namespace deepinfer::backend::cuda

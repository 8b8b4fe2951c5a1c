#pragma once
// The host-to-device metadata of a forward pass (token ids, positions, segment descriptions, block
// tables, cache addresses, entry lists) goes through one staging area: pinned host chunks, each
// mirrored by a device chunk at the same offsets. put() writes values into the next free bytes of
// the pinned chunks and returns the device address beside them; while copying, it also queues the
// copy of those bytes on the pass's stream. A captured graph (step_graphs.h) holds those copies as
// nodes that read fixed pinned addresses, so a replay only writes the same puts again, in the same
// order (the same offsets), and launches the graph: its copies move the new values.
//
// Pinned memory makes each copy a true asynchronous DMA, so a byte may not be rewritten before the
// copy that reads it has run: the backend has two staging areas that passes take in turn, each
// only once the pass that used it last is done on the device (CudaBackend::take_bank), so a pass's
// host work may overlap the pass before it. reset() starts a pass.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

namespace deepinfer::backend::cuda {

class Staging {
 public:
  Staging() = default;
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // A new pass: puts start again at the first byte. copying: queue each put's copy (eager passes
  // and captures); off while a graph's copies will move the values (replays).
  void reset(bool copying) {
    chunk_ = 0;
    offset_ = 0;
    copying_ = copying;
  }
  void set_copying(bool copying) { copying_ = copying; }

  // The device address of `values` as copied there (an empty span gets a valid address too).
  template <typename T>
  T* put(std::span<const T> values, cudaStream_t stream) {
    return static_cast<T*>(put_bytes(values.data(), values.size_bytes(), stream));
  }
  template <typename T>
  T* put(const std::vector<T>& values, cudaStream_t stream) {
    return put(std::span<const T>(values), stream);
  }

 private:
  struct Chunk {
    std::byte* host = nullptr;
    std::byte* device = nullptr;
    std::size_t bytes = 0;
  };
  void* put_bytes(const void* values, std::size_t bytes, cudaStream_t stream);

  std::vector<Chunk> chunks_;  // only ever appended to: a captured graph's addresses stay valid
  std::size_t chunk_ = 0;
  std::size_t offset_ = 0;
  bool copying_ = true;
};

}  // namespace deepinfer::backend::cuda

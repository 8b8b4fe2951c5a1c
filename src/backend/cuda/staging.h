#pragma once
// The host-to-device metadata of a forward pass (token ids, positions, segment descriptions, block
// tables, cache addresses, entry lists) goes through one staging area: pinned host chunks, each
// mirrored by a device chunk at the same offsets. put() writes values into the next free bytes of
// the pinned chunks and returns the device address beside them; while copying, it also queues the
// copy of those bytes on the pass's stream. A captured graph (step_graphs.h) does not copy put by
// put: a capture queues no copies, and the backend gives the graph one copy node per chunk written
// (written()) ahead of all its other nodes, reading fixed pinned addresses; a replay only writes
// the same puts again, in the same order (the same offsets), and launches the graph, whose copies
// move the new values. (A copy node between two kernels also ends their programmatic overlap, and
// a decode step made ~10 puts a layer.)
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
    written_.assign(chunks_.size(), 0);
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

  // The bytes put since reset(), a range per chunk from its first byte.
  struct Range {
    void* device;
    const void* host;
    std::size_t bytes;
  };
  std::vector<Range> written() const;

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
  std::vector<std::size_t> written_;  // per chunk: the end of the bytes put since reset()
};

}  // namespace deepinfer::backend::cuda

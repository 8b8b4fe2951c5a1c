#pragma once
// Device memory the CUDA backend owns: RAII buffers, the weight store (each checkpoint tensor
// uploaded once, in its stored encoding, found again by its host address) and the activation
// arena (buffers that grow to the largest call and are then reused).
#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kernels/kernels.h"

namespace deepinfer::backend::cuda {

// cudaMalloc'd bytes, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Bytes a weight matrix's data and scales take as stored.
std::size_t matrix_data_bytes(const kernels::WeightMatrix& w);
std::size_t matrix_scale_bytes(const kernels::WeightMatrix& w);

// The model's tensors on the device. Plan first (plan_* adds sizes, so a model that does not fit
// is refused before any allocation), then upload; lookups by the host tensor's address.
class WeightStore {
 public:
  void plan_matrix(const kernels::WeightMatrix& w);
  void plan_floats(std::span<const float> values);
  void plan_ints(std::span<const int32_t> values);
  std::size_t planned_bytes() const { return planned_bytes_; }

  // The device copy (same descriptor, device pointers); uploaded on first call.
  const kernels::WeightMatrix& matrix(const kernels::WeightMatrix& host);
  // A routed expert's device copy: with `tiled` and a shape that fits (cuda::expert_tiles_fit),
  // its codes in WeightLayout::ExpertTiles, else as matrix(). A host matrix has one device copy:
  // asking for it in the other layout later is an Error.
  const kernels::WeightMatrix& expert_matrix(const kernels::WeightMatrix& host, bool tiled);
  const float* floats(std::span<const float> host);
  const int32_t* ints(std::span<const int32_t> host);
  // A device array of device descriptors, uploaded once per distinct `key`.
  const kernels::WeightMatrix* descriptor_array(const void* key, const std::vector<kernels::WeightMatrix>& host);
  // The array uploaded under `key`, or null (so a step need not rebuild its host side).
  const kernels::WeightMatrix* find_descriptor_array(const void* key) const;
  // The largest WeightMatrix::max_e8m0 of the array uploaded under `key` (255 when none is).
  uint8_t descriptor_array_max_e8m0(const void* key) const;

  std::size_t uploaded_bytes() const { return uploaded_bytes_; }

 private:
  const void* upload(const void* host, std::size_t bytes);

  std::unordered_map<const void*, kernels::WeightMatrix> matrices_;
  std::unordered_map<const void*, const void*> copies_;  // host address -> device address
  std::unordered_map<const void*, uint8_t> array_max_e8m0_;  // descriptor array key -> its largest scale byte
  std::vector<DeviceBuffer> buffers_;
  std::size_t planned_bytes_ = 0;
  std::size_t uploaded_bytes_ = 0;
};

// Activation buffers, one per slot, grown (never shrunk) to the largest call seen.
class Arena {
 public:
  template <typename T>
  T* get(int slot, std::size_t count) {
    return static_cast<T*>(get_bytes(slot, count * sizeof(T)));
  }
  std::size_t bytes() const;
  // Counts the reallocations: a buffer that grows moves (captured graphs hold its old address).
  uint64_t generation() const { return generation_; }

 private:
  void* get_bytes(int slot, std::size_t bytes);
  std::vector<DeviceBuffer> slots_;
  uint64_t generation_ = 0;
};

}  // namespace deepinfer::backend::cuda

#pragma once
// The CUDA backend (docs/ARCHITECTURE.md, "CUDA backend"): the model's coarse operations on one
// GPU, weights uploaded once in their checkpoint encoding, activations in a device arena, the
// cache blocks and the per-sequence state in device memory.
#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"

namespace deepinfer::backend::cuda {

// CUDA devices that answer (0 without a driver or a device).
int device_count();

struct DeviceInfo {
  std::string name;
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};
DeviceInfo device_info(int index);

struct Attached {
  std::shared_ptr<const model::Backend> backend;
  int64_t weight_bytes = 0;  // uploaded to the device
  int64_t activation_bytes = 0;   // the arena, sized for max_rows
};

// Uploads what the backend runs on the GPU and sizes the activation arena for calls of up to
// max_rows rows (larger calls grow it). A model that does not fit in the device's free memory is
// an Error with the numbers, raised before anything is allocated.
Attached make_backend(const model::Model& model, int index, int64_t max_rows);

}  // namespace deepinfer::backend::cuda

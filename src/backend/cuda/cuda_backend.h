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

struct Options {
  // Decode steps replay CUDA graphs captured per (batch, context bound) (step_graphs.h); off:
  // every pass launches its kernels one by one (`--enforce-eager`).
  bool cuda_graphs = true;
  // Every kernel reduces in an order fixed by the weights' shapes and a row's own keys, so a
  // row's logits have the same bits alone or in any batch and chunking (`--batch-invariant`):
  // the sink attention cuts every row's keys into ranges of kInvariantRangeKeys; off, the ranges
  // of a small call follow its row count.
  bool batch_invariant = false;
};

// Uploads what the backend runs on the GPU and sizes the activation arena for calls of up to
// max_rows rows (larger calls grow it). A model that does not fit in the device's free memory is
// an Error with the numbers, raised before anything is allocated.
Attached make_backend(const model::Model& model, int index, int64_t max_rows, const Options& options = {});

// How a CUDA backend's decode steps ran so far (zeros for any other backend).
struct GraphCounts {
  int64_t captured = 0;  // graphs captured (a step each, launched as captured)
  int64_t replayed = 0;  // steps that replayed a graph
};
GraphCounts graph_counts(const model::Backend& backend);

}  // namespace deepinfer::backend::cuda

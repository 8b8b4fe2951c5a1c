#pragma once
// A decode step that a captured CUDA graph replays (backend/cuda/step_graphs.h) still runs its host
// code, because that code writes the step's metadata (positions, block tables, cache addresses)
// where the graph's copies read it; but the step's device work is the graph's. While a
// SkipLaunches lives on the calling thread, every wrapper of kernels/cuda (cuda_kernels.h,
// attention_kernels.h) returns before enqueuing anything. The sampler's wrappers are not gated:
// the sampler runs after the graph, outside it.
namespace deepinfer::kernels::cuda {

bool launches_skipped();

class SkipLaunches {
 public:
  SkipLaunches();
  ~SkipLaunches();
  SkipLaunches(const SkipLaunches&) = delete;
  SkipLaunches& operator=(const SkipLaunches&) = delete;
};

}  // namespace deepinfer::kernels::cuda

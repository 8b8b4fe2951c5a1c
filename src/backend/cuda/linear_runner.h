#pragma once
// kernels::cuda::linear as the backend calls it: with the pass's SIMT split workspace and, for the
// weights the tensor-core kernel runs, its buffers taken from the arena at the call's own size
// (reserve sizes them for a decode step, so a graph's steps never grow them; a longer prefill
// call grows them, outside any capture).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/arena_slots.h"
#include "backend/cuda/device_memory.h"
#include "kernels/cuda/cuda_kernels.h"

namespace deepinfer::backend::cuda {

class LinearRunner {
 public:
  // The arena slots of a runner's tensor-core buffers: one set per stream that runs linears at
  // the same time as another (the pass's side branch has its own).
  struct Slots {
    int split_input;
    int partials;
  };
  // split: linear's SIMT split workspace (null: blocks walk their column ranges, the same bits);
  // tensor_cores false keeps every weight on the SIMT kernel (DEEPINFER_CUDA_SIMT=1).
  // tile_counters: linear_mma's (kLinearMmaTileCounters zeroed words, for this stream alone).
  LinearRunner(Arena& arena, cudaStream_t stream, float* split, bool tensor_cores, uint32_t* tile_counters,
               Slots slots = {kSplitInput, kMmaPartials})
      : arena_(arena),
        stream_(stream),
        split_(split),
        tensor_cores_(tensor_cores),
        tile_counters_(tile_counters),
        slots_(slots) {}

  void operator()(const float* x, int64_t tokens, const kernels::WeightMatrix& w, float* y) const {
    kernels::cuda::LinearWorkspace workspace;
    workspace.split = split_;
    workspace.tile_counters = tile_counters_;
    if (tokens > 0 && runs_on_tensor_cores(w)) {
      workspace.x_split_words = kernels::cuda::linear_mma_split_words(tokens, w);
      workspace.x_split = arena_.get<uint32_t>(slots_.split_input, static_cast<std::size_t>(workspace.x_split_words));
      workspace.partial_floats = kernels::cuda::linear_mma_partial_floats(tokens, w);
      if (workspace.partial_floats > 0)
        workspace.partials = arena_.get<float>(slots_.partials, static_cast<std::size_t>(workspace.partial_floats));
    }
    kernels::cuda::linear(x, tokens, w, y, stream_, workspace);
  }

  // One group's slice of a grouped projection on the tensor cores: x rows x_stride floats apart,
  // y rows y_stride apart. False, running nothing, where the tensor cores do not run w.
  bool strided(const float* x, int64_t x_stride, int64_t tokens, const kernels::WeightMatrix& w, float* y,
               int64_t y_stride) const {
    if (!runs_on_tensor_cores(w)) return false;
    if (tokens == 0) return true;
    const int64_t words = kernels::cuda::linear_mma_split_words(tokens, w);
    const int64_t partial_floats = kernels::cuda::linear_mma_partial_floats(tokens, w);
    auto* x_split = arena_.get<uint32_t>(slots_.split_input, static_cast<std::size_t>(words));
    float* partials = partial_floats > 0 ? arena_.get<float>(slots_.partials, static_cast<std::size_t>(partial_floats)) : nullptr;
    kernels::cuda::linear_mma(x, x_stride, tokens, w, y, y_stride, x_split, partials, stream_, tile_counters_);
    return true;
  }

  // A grouped projection in one launch (kernels::cuda::linear_mma_grouped): `group` is one
  // group's device descriptor with no_nan_codes set only if every group has it; group_weights the
  // device array of all of them. False, running nothing, where that kernel does not run them.
  bool grouped(const float* x, int64_t x_stride, int64_t tokens, const kernels::WeightMatrix& group,
               const kernels::WeightMatrix* group_weights, int64_t groups, float* y, int64_t y_stride) const {
    if (!tensor_cores_ || !group_weights || !kernels::cuda::linear_mma_grouped_supports(group)) return false;
    if (tokens == 0) return true;
    const int64_t words = kernels::cuda::linear_mma_grouped_split_words(tokens, group, groups);
    const int64_t partial_floats = kernels::cuda::linear_mma_grouped_partial_floats(tokens, group, groups);
    auto* x_split = arena_.get<uint32_t>(slots_.split_input, static_cast<std::size_t>(words));
    float* partials = partial_floats > 0 ? arena_.get<float>(slots_.partials, static_cast<std::size_t>(partial_floats)) : nullptr;
    kernels::cuda::linear_mma_grouped(x, x_stride, tokens, group, group_weights, groups, y, y_stride, x_split, partials,
                                      stream_, tile_counters_);
    return true;
  }

  bool runs_on_tensor_cores(const kernels::WeightMatrix& w) const {
    return tensor_cores_ && kernels::cuda::linear_mma_supports(w);
  }

  cudaStream_t stream() const { return stream_; }

 private:
  Arena& arena_;
  cudaStream_t stream_;
  float* split_;
  bool tensor_cores_;
  uint32_t* tile_counters_;
  Slots slots_;
};

}  // namespace deepinfer::backend::cuda

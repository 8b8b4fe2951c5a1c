// The (token, slot) pairs of a MoE step ordered by expert: a stable CUB radix sort of the expert
// ids with the pair index as payload, then one pass that writes each position's token and pair
// and each pair's position. Sorted, the pairs of one expert are consecutive, so linear_gathered
// streams an expert's weights once per run of up to a tile of pairs instead of once per pair,
// and the numbers do not change (a pair's row is reduced the same way in any run).
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_gate.h"

namespace deepinfer::kernels::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;

__global__ void iota_kernel(int32_t* out, int64_t count) {
  await_previous_grid();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<int32_t>(i);
}

__global__ void finish_kernel(const int32_t* __restrict__ order, int64_t pairs, int64_t top_k,
                              int32_t* __restrict__ sorted_token, int64_t* __restrict__ sorted_pair,
                              int64_t* __restrict__ position_of) {
  await_previous_grid();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pair = order[i];
    sorted_token[i] = static_cast<int32_t>(pair / top_k);
    sorted_pair[i] = pair;
    position_of[pair] = i;
  }
}

// Scratch: CUB's temporary storage, then the pair indices in and out of the sort.
std::size_t cub_bytes(int64_t pairs) {
  std::size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                  static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
                                  static_cast<int>(pairs));
  return (bytes + 255) / 256 * 256;
}

std::size_t index_bytes(int64_t pairs) { return (static_cast<std::size_t>(pairs) * 4 + 255) / 256 * 256; }

}  // namespace

std::size_t moe_sort_scratch_bytes(int64_t pairs) {
  if (pairs <= 0) return 0;
  return cub_bytes(pairs) + 2 * index_bytes(pairs);
}

void moe_sort(const int32_t* experts, int64_t pairs, int64_t top_k, void* scratch, std::size_t scratch_bytes,
              int32_t* sorted_expert, int32_t* sorted_token, int64_t* sorted_pair, int64_t* position_of,
              Stream stream) {
  if (launches_skipped()) return;
  if (pairs < 0 || top_k <= 0) fail("cuda::moe_sort: bad sizes (pairs ", pairs, ", top_k ", top_k, ")");
  if (pairs == 0) return;
  if (pairs >= (int64_t{1} << 31)) fail("cuda::moe_sort: ", pairs, " pairs, over 2^31");
  if (scratch_bytes < moe_sort_scratch_bytes(pairs))
    fail("cuda::moe_sort: ", scratch_bytes, " bytes of scratch, ", moe_sort_scratch_bytes(pairs), " needed");
  const cudaStream_t s = native(stream);
  std::size_t temp_bytes = cub_bytes(pairs);
  auto* bytes = static_cast<uint8_t*>(scratch);
  auto* order_in = reinterpret_cast<int32_t*>(bytes + temp_bytes);
  auto* order_out = reinterpret_cast<int32_t*>(bytes + temp_bytes + index_bytes(pairs));
  launch(iota_kernel, grid_for(pairs, kThreads), kThreads, 0, s, order_in, pairs);
  check_launch("cuda::moe_sort (iota)");
  // Stable, so pairs of one expert keep their token order.
  const cudaError_t status = cub::DeviceRadixSort::SortPairs(scratch, temp_bytes, experts, sorted_expert, order_in,
                                                             order_out, static_cast<int>(pairs), 0, 32, s);
  if (status != cudaSuccess) fail("cuda::moe_sort: CUB radix sort failed: ", cudaGetErrorString(status));
  launch(finish_kernel, grid_for(pairs, kThreads), kThreads, 0, s, order_out, pairs, top_k, sorted_token, sorted_pair,
         position_of);
  check_launch("cuda::moe_sort");
}

}  // namespace deepinfer::kernels::cuda

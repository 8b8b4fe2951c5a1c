// check_launch: turns the last CUDA error into deepinfer::Error.
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"

namespace deepinfer::kernels::cuda {

void check_launch(const char* what) {
  const cudaError_t status = cudaGetLastError();  // also clears a non-sticky error
  if (status != cudaSuccess)
    fail(what, ": CUDA error ", static_cast<int>(status), " (", cudaGetErrorName(status), "): ",
         cudaGetErrorString(status));
}

}  // namespace deepinfer::kernels::cuda

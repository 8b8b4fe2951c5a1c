// decode_step_bench's GPU bandwidth reference (copy_bandwidth.h): a device-to-device cudaMemcpy
// timed with cudaEvents, through the CUDA runtime API only (no kernels of our own).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "copy_bandwidth.h"
#include "core/error.h"

namespace deepinfer::bench {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(status));
}

}  // namespace

CopyBandwidth cuda_copy_bandwidth(int device, int64_t bytes, int repeats) {
  check(cudaSetDevice(device), "cudaSetDevice");
  size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  // Two buffers plus 1 GiB of headroom for the backend's arena and the driver.
  const int64_t headroom = int64_t{1} << 30;
  const int64_t requested = bytes;
  while (bytes > (int64_t{64} << 20) && 2 * bytes + headroom > static_cast<int64_t>(free_bytes)) bytes /= 2;
  void* source = nullptr;
  void* target = nullptr;
  check(cudaMalloc(&source, static_cast<size_t>(bytes)), "cudaMalloc (copy source)");
  check(cudaMalloc(&target, static_cast<size_t>(bytes)), "cudaMalloc (copy target)");
  check(cudaMemset(source, 1, static_cast<size_t>(bytes)), "cudaMemset");
  check(cudaMemset(target, 0, static_cast<size_t>(bytes)), "cudaMemset");
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  // Untimed first copy (first touch of the pages, clocks up).
  check(cudaMemcpy(target, source, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice), "cudaMemcpy");
  std::vector<double> seconds;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    check(cudaMemcpyAsync(target, source, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, nullptr),
          "cudaMemcpyAsync");
    check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    seconds.push_back(ms / 1000.0);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(source);
  cudaFree(target);
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  const double median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  CopyBandwidth out;
  out.bytes = bytes;
  out.median_seconds = median;
  out.bytes_per_second = 2.0 * static_cast<double>(bytes) / median;
  char how[256];
  std::snprintf(how, sizeof how, "cudaMemcpy device to device, %.2f GB%s, median of %zu, cudaEvent timing; read + written",
                static_cast<double>(bytes) / 1e9, bytes != requested ? " (shrunk to fit free memory)" : "", n);
  out.how = how;
  return out;
}

}  // namespace deepinfer::bench

// check_launch: turns the last CUDA error into deepinfer::Error; the launch gate (launch_gate.h);
// whether kernels launch with programmatic dependent launch (cuda_common.cuh).
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_gate.h"

namespace deepinfer::kernels::cuda {

void check_launch(const char* what) {
  const cudaError_t status = cudaGetLastError();  // also clears a non-sticky error
  if (status != cudaSuccess)
    fail(what, ": CUDA error ", static_cast<int>(status), " (", cudaGetErrorName(status), "): ",
         cudaGetErrorString(status));
}

namespace detail {
bool programmatic_launch_enabled() {
  static const bool enabled = [] {
    const char* setting = std::getenv("DEEPINFER_PDL");
    return setting == nullptr || std::string_view(setting) != "0";
  }();
  return enabled;
}

int current_device_sm_count() {
  static std::array<std::atomic<int>, 64> sm_counts{};  // per device; 0 unknown
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= static_cast<int>(sm_counts.size())) return 0;
  int sms = sm_counts[static_cast<std::size_t>(device)].load(std::memory_order_relaxed);
  if (sms == 0) {
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 0;
    sm_counts[static_cast<std::size_t>(device)].store(sms, std::memory_order_relaxed);
  }
  return sms;
}
}  // namespace detail

namespace {
thread_local int skip_depth = 0;
}  // namespace

bool launches_skipped() { return skip_depth > 0; }
SkipLaunches::SkipLaunches() { ++skip_depth; }
SkipLaunches::~SkipLaunches() { --skip_depth; }

}  // namespace deepinfer::kernels::cuda

#pragma once
// What the CUDA benches (cuda_gemm_bench.cu, cuda_moe_bench.cu) share: checked CUDA calls, device
// buffers, counter-based random fills and the graph-replay timer. Each bench is one translation
// unit, so everything here has internal linkage.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace {

using deepinfer::fail;
using deepinfer::str_cat;

void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess)
    fail("CUDA: ", what, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

void launched(const char* what) { check(cudaGetLastError(), what); }

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, const std::string& what) : bytes_(bytes) {
    if (bytes > 0) check(cudaMalloc(&ptr_, bytes), str_cat("cudaMalloc ", bytes, " bytes (", what, ")"));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(other.bytes_) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = other.bytes_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  uint8_t* bytes_at(std::size_t offset) const { return static_cast<uint8_t*>(ptr_) + offset; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

std::size_t round_up(std::size_t value, std::size_t multiple) { return (value + multiple - 1) / multiple * multiple; }
__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

unsigned grid_for(int64_t count, int threads = 256) {
  return static_cast<unsigned>(std::clamp<int64_t>(ceil_div(count, threads), 1, 4096));
}

// Counter-based random bits (splitmix64 of seed and index), so every fill is one parallel pass.
__host__ __device__ inline uint64_t random_bits(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0xD1B54A32D192ED03ull + index + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1): 24 random bits.
__device__ inline float random_unit(uint64_t seed, uint64_t index) {
  return static_cast<float>(random_bits(seed, index) >> 40) * 0x1p-23f - 1.0f;
}

__global__ void fill_floats_kernel(float* out, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = random_unit(seed, static_cast<uint64_t>(i));
}

// E8M0 exponents 119..123: scales 2^-8 .. 2^-4, around the 2^-6 of the released checkpoints.
// The largest byte fill_e8m0_kernel writes (WeightMatrix::max_e8m0 of its matrices).
constexpr int kMaxFilledE8m0 = 123;

__global__ void fill_e8m0_kernel(uint8_t* out, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = static_cast<uint8_t>(kMaxFilledE8m0 - 4 + random_bits(seed, static_cast<uint64_t>(i)) % 5);
}

// ---------------------------------------------------------------------------------------------
// Timing: a CUDA graph of back-to-back calls, replayed.

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  Events() {
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Median microseconds per call of enqueue(0 .. calls - 1) captured into one graph.
double time_graph(cudaStream_t stream, int calls, int warmup, int repeats, const std::function<void(int)>& enqueue) {
  Graph g;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  try {
    for (int i = 0; i < calls; ++i) enqueue(i);
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream, &partial);
    if (partial) cudaGraphDestroy(partial);
    (void)cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(stream, &g.graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&g.exec, g.graph, 0), "cudaGraphInstantiate");
  for (int r = 0; r < warmup; ++r) check(cudaGraphLaunch(g.exec, stream), "cudaGraphLaunch (warm-up)");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (warm-up)");
  Events events;
  std::vector<double> per_call_us;
  for (int r = 0; r < repeats; ++r) {
    check(cudaEventRecord(events.start, stream), "cudaEventRecord");
    check(cudaGraphLaunch(g.exec, stream), "cudaGraphLaunch");
    check(cudaEventRecord(events.stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(events.stop), "cudaEventSynchronize (timed replay)");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, events.start, events.stop), "cudaEventElapsedTime");
    per_call_us.push_back(1000.0 * ms / calls);
  }
  return median_of(std::move(per_call_us));
}

}  // namespace

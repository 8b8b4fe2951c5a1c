#pragma once
// Work that needs what a pass's stream has queued so far and that the stream's next kernels do
// not, run beside them on the backend's side stream: a fork and a join, which a captured graph
// keeps as two branches. At small batches most kernels of a step fill few SMs and take a few
// microseconds of latency each, so a sublayer's independent chains (the shared expert beside the
// router and the routed experts, the K = V row beside the query, V4.1's latents beside the index
// queries) overlap instead of adding up. The same kernels on the same inputs: the same bits.
//
// The side's linears run on a LinearRunner of their own (their own split buffers and tile
// counters) and its kernels on the side stream; the branch's other buffers must be ones the main
// stream does not touch until the join. One branch is open at a time on a lane.
#include <cuda_runtime.h>

#include "backend/cuda/linear_runner.h"
#include "core/error.h"
#include "kernels/cuda/launch_gate.h"

namespace deepinfer::backend::cuda {

// The streams a pass's work runs on: the pass's own (main); the side branch's, beside a
// sublayer's critical chain; V4.1's mix lane, where a site's projection and mix run beside the
// sublayer they do not feed (CudaForwardPass::enter_site). Each has its own events, so a mix
// branch and a side branch can be open together.
enum class Lane { Main, Side, Mix };

// What a pass forks with: its stream, the side's runner (on the side stream), the events.
struct SideLane {
  cudaStream_t main = nullptr;
  const LinearRunner* linear = nullptr;
  cudaEvent_t fork = nullptr;
  cudaEvent_t join = nullptr;
};

class SideBranch {
 public:
  // Forks now; nothing in a replay (kernels/cuda/launch_gate.h), whose graph holds the branch.
  explicit SideBranch(const SideLane& lane) : lane_(lane) {
    if (kernels::cuda::launches_skipped()) return;
    check(cudaEventRecord(lane_.fork, lane_.main), "cudaEventRecord");
    check(cudaStreamWaitEvent(stream(), lane_.fork, 0), "cudaStreamWaitEvent");
    open_ = true;
  }
  // Joins if join() did not: a failure between the two still leaves a capture joined.
  ~SideBranch() {
    if (!open_) return;
    (void)cudaEventRecord(lane_.join, stream());
    (void)cudaStreamWaitEvent(lane_.main, lane_.join, 0);
  }
  SideBranch(const SideBranch&) = delete;
  SideBranch& operator=(const SideBranch&) = delete;

  // The main stream waits for what the branch queued.
  void join() {
    if (!open_) return;
    open_ = false;
    check(cudaEventRecord(lane_.join, stream()), "cudaEventRecord");
    check(cudaStreamWaitEvent(lane_.main, lane_.join, 0), "cudaStreamWaitEvent");
  }
  cudaStream_t stream() const { return lane_.linear->stream(); }
  const LinearRunner& linear() const { return *lane_.linear; }

 private:
  static void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(status));
  }
  SideLane lane_;
  bool open_ = false;
};

}  // namespace deepinfer::backend::cuda

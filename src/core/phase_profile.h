#pragma once
// DEEPINFER_PHASE_PROFILE=1: host wall time by named phase of the engine's step (snapshots,
// the pass, verification, drafting), summed over the process and written to stderr at exit.
// Unlike DEEPINFER_CUDA_PROFILE it does not synchronise anything: a phase that only issues
// device work is charged for the issue, and the wait lands in whichever phase reads the result.
// A development tool for finding where a step's host time goes; off, a phase costs one branch.
#include <chrono>

namespace deepinfer {

class ScopedPhase {
 public:
  explicit ScopedPhase(const char* name);
  ~ScopedPhase();
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  const char* name_;  // null when profiling is off
  std::chrono::steady_clock::time_point start_;
};

bool phase_profile_enabled();

}  // namespace deepinfer

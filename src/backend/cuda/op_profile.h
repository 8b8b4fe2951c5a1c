#pragma once
// DEEPINFER_CUDA_PROFILE=1: where a forward pass's time goes, by coarse operation. Each timed
// section synchronises the stream before and after (so the figures are wall time of the GPU work
// plus the host work between), which slows the pass down: a development tool, off by default.
// The totals go to stderr when the backend is destroyed. Each section is also a phase of
// DEEPINFER_PHASE_PROFILE (core/phase_profile.h), which times its host side without synchronising.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <cuda_runtime.h>

#include "core/phase_profile.h"

namespace deepinfer::backend::cuda {

class OpProfile {
 public:
  OpProfile() : enabled_(std::getenv("DEEPINFER_CUDA_PROFILE") && *std::getenv("DEEPINFER_CUDA_PROFILE") == '1') {}
  ~OpProfile() {
    if (!enabled_ || totals_.empty()) return;
    double all = 0;
    for (const auto& [name, entry] : totals_) all += entry.seconds;
    std::fprintf(stderr, "DEEPINFER_CUDA_PROFILE: %.3f s in timed operations\n", all);
    for (const auto& [name, entry] : totals_)
      std::fprintf(stderr, "  %-24s %10.3f ms %6.1f%%  (%lld calls)\n", name.c_str(), entry.seconds * 1e3,
                   100.0 * entry.seconds / all, entry.calls);
  }
  bool enabled() const { return enabled_; }
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // Times one section on `stream` until destroyed; nothing when profiling is off.
  class Section {
   public:
    Section(OpProfile& profile, const char* name, cudaStream_t stream)
        : profile_(profile.enabled_ ? &profile : nullptr), name_(name), stream_(stream), host_time_(name) {
      if (!profile_) return;
      cudaStreamSynchronize(stream_);
      start_ = std::chrono::steady_clock::now();
    }
    ~Section() {
      if (!profile_) return;
      cudaStreamSynchronize(stream_);
      Entry& entry = profile_->totals_[name_];
      entry.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      ++entry.calls;
    }
    Section(const Section&) = delete;
    Section& operator=(const Section&) = delete;

   private:
    OpProfile* profile_;
    const char* name_;
    cudaStream_t stream_;
    ScopedPhase host_time_;  // DEEPINFER_PHASE_PROFILE: the host time of the operation (launches, staging)
    std::chrono::steady_clock::time_point start_;
  };

 private:
  struct Entry {
    double seconds = 0;
    long long calls = 0;
  };
  bool enabled_;
  std::map<std::string, Entry> totals_;
};

}  // namespace deepinfer::backend::cuda

#include "core/phase_profile.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace deepinfer {

namespace {

class PhaseTotals {
 public:
  ~PhaseTotals() {
    if (totals_.empty()) return;
    std::fprintf(stderr, "DEEPINFER_PHASE_PROFILE (host wall time by phase):\n");
    for (const auto& [name, entry] : totals_)
      std::fprintf(stderr, "  %-28s %10.3f ms %8lld calls %8.1f us/call\n", name.c_str(), entry.seconds * 1e3,
                   entry.calls, 1e6 * entry.seconds / static_cast<double>(entry.calls));
  }
  void add(const char* name, double seconds) {
    const std::lock_guard lock(mutex_);
    Entry& entry = totals_[name];
    entry.seconds += seconds;
    ++entry.calls;
  }

 private:
  struct Entry {
    double seconds = 0;
    long long calls = 0;
  };
  std::mutex mutex_;
  std::map<std::string, Entry> totals_;
};

PhaseTotals& phase_totals() {
  static PhaseTotals instance;
  return instance;
}

}  // namespace

bool phase_profile_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("DEEPINFER_PHASE_PROFILE");
    if (!value || *value != '1') return false;
    phase_totals();  // constructed before any phase ends, so destroyed after them
    return true;
  }();
  return enabled;
}

ScopedPhase::ScopedPhase(const char* name) : name_(phase_profile_enabled() ? name : nullptr) {
  if (name_) start_ = std::chrono::steady_clock::now();
}

ScopedPhase::~ScopedPhase() {
  if (name_) phase_totals().add(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
}

}  // namespace deepinfer

#pragma once
// How the forward pass spreads its non-linear loops (attention heads, indexer scores, expert
// dispatch, per-token norms and mixes) over the default thread pool. Every item must be computed
// by the same code whatever chunk it lands in, never reduced across items, so results are
// bit-identical for any pool size; the threshold only decides whether waking the pool pays.
#include <atomic>
#include <cstdint>

#include "core/thread_pool.h"

namespace deepinfer::model {

// Below this much work (roughly multiply-adds) a call runs inline: a pool wake-up costs 3 to
// 14 us on the 2-CPU machine (docs/BENCHMARKS.md), about this many multiply-adds.
inline constexpr int64_t kMinParallelWork = 32 * 1024;

inline std::atomic<int64_t> g_min_parallel_work{kMinParallelWork};

// Sets the threshold until destroyed; tests pass 0 so that even the tiny fixtures run every loop
// on the pool. Process-wide, like ScopedDefaultThreadPool.
class ScopedMinParallelWork {
 public:
  explicit ScopedMinParallelWork(int64_t work) : previous_(g_min_parallel_work.exchange(work)) {}
  ~ScopedMinParallelWork() { g_min_parallel_work.store(previous_); }
  ScopedMinParallelWork(const ScopedMinParallelWork&) = delete;
  ScopedMinParallelWork& operator=(const ScopedMinParallelWork&) = delete;

 private:
  int64_t previous_;
};

inline constexpr int kItemChunksPerThread = 8;

// fn(begin, end) over disjoint ranges covering [0, count); `work_per_item` estimates one item's cost.
template <typename Fn>
void parallel_items(int64_t count, int64_t work_per_item, Fn&& fn) {
  if (count <= 0) return;
  if (count == 1 || count * work_per_item < g_min_parallel_work.load(std::memory_order_relaxed)) {
    fn(int64_t{0}, count);
    return;
  }
  // Items differ in cost (a late token attends more rows; the shared expert takes every token, a
  // routed one a few): finer chunks claimed by whichever thread is free keep both busy.
  default_thread_pool().parallel_for(count, fn, kItemChunksPerThread);
}

}  // namespace deepinfer::model

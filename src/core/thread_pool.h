#pragma once
// The one thread pool every CPU kernel runs on. A decode step calls it hundreds of times per
// token, so a call allocates nothing, wakes the workers through a shared generation counter
// (optionally spinning before sleeping on a condition variable), and the calling thread does a share.
//
// Partitioning is static and deterministic: parallel_for(count, fn) splits [0, count) into
// min(size(), count) contiguous chunks (min(size() * chunks_per_thread, count) when asked for
// more) whose bounds depend only on count and size(), and chunk 0 runs on the caller. Kernels
// that must be bit-reproducible rely on their results not depending on the split at all; the
// fixed split only makes runs repeatable for everyone else.
// Which thread runs chunks 1.. is not fixed: each is claimed by the first thread to reach it, the
// caller included once its own chunk is done, so a worker the OS has not scheduled yet (the
// machine is shared) delays nothing: the caller takes its chunk instead of waiting.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace deepinfer {

class ThreadPool {
 public:
  // `threads` counts the caller: ThreadPool(1) starts no worker and runs everything inline.
  // `spin_iterations` is how many pause-loop polls an idle worker (and a waiting caller) makes
  // before sleeping. The default, 0, sleeps at once, leaving the spare core to others on the
  // shared 2-CPU machine. Since the caller claims chunks a late worker has not started, spinning
  // no longer slows a call down (docs/BENCHMARKS.md), and a worker kept awake between a decode
  // step's short loops is what makes 2 threads faster there: try it on dedicated cores.
  explicit ThreadPool(int threads, int spin_iterations = kDefaultSpinIterations);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks covering [0, count) exactly once and returns when
  // all are done. Called from inside a chunk (of any pool), it runs fn(0, count) inline on the
  // calling thread. Calls from several outside threads at once are serialised. If chunks throw,
  // every chunk still finishes and the exception of the lowest-numbered failing chunk is
  // rethrown to the caller.
  // `chunks_per_thread` (1 to kMaxChunksPerThread) splits [0, count) into that many chunks per
  // thread (at most count), claimed in order by whichever thread is free: for items of uneven
  // cost, where one contiguous chunk a thread would leave the others waiting for the slowest.
  template <typename Fn>
  void parallel_for(int64_t count, Fn&& fn, int chunks_per_thread = 1) {
    using Callable = std::remove_reference_t<Fn>;
    run(count, const_cast<void*>(static_cast<const void*>(&fn)), [](void* callable, int64_t begin, int64_t end) {
      (*static_cast<Callable*>(callable))(begin, end);
    }, chunks_per_thread);
  }
  static constexpr int kMaxChunksPerThread = 8;

  // Chunk `index` of `chunks` over [0, count): the split parallel_for uses.
  static std::pair<int64_t, int64_t> chunk_bounds(int64_t count, int64_t chunks, int64_t index) {
    return {count * index / chunks, count * (index + 1) / chunks};
  }

  static constexpr int kDefaultSpinIterations = 0;

  // While at least one Warm of a pool is alive, its idle workers (and a caller waiting for their
  // chunks) poll for the next job instead of sleeping, for up to kWarmSpinLimit at a stretch
  // (yielding the core between polls after kWarmPauseLimit, so they never starve other threads):
  // a decode step is hundreds of short parallel regions with serial work between them, and a
  // sleeping worker takes longer to wake than many of those regions last. Held for one forward
  // pass, so the spare cores are only busy while a step runs and sleep between steps.
  class Warm {
   public:
    explicit Warm(ThreadPool& pool) : pool_(pool) { pool_.warm_scopes_.fetch_add(1, std::memory_order_relaxed); }
    ~Warm() { pool_.warm_scopes_.fetch_sub(1, std::memory_order_relaxed); }
    Warm(const Warm&) = delete;
    Warm& operator=(const Warm&) = delete;

   private:
    ThreadPool& pool_;
  };
  static constexpr std::chrono::microseconds kWarmSpinLimit{2000};
  static constexpr std::chrono::microseconds kWarmPauseLimit{50};  // then each poll round yields the core

 private:
  using ChunkFunction = void (*)(void*, int64_t, int64_t);
  void run(int64_t count, void* callable, ChunkFunction function, int chunks_per_thread);
  void run_chunk(int index);
  // Claims and runs unclaimed chunks of the current job until none is left.
  void run_claimed_chunks();
  void worker_loop();
  // Polls done() with pause instructions while spinning is allowed (spin_iterations_ polls, or
  // up to kWarmSpinLimit while warm); returns done()'s last value.
  template <typename Done>
  bool spin_until(Done&& done) const;

  std::vector<std::thread> workers_;
  const int spin_iterations_;

  // The current job; written by the caller before the generation is bumped, read by workers after.
  void* job_callable_ = nullptr;
  ChunkFunction job_function_ = nullptr;
  int64_t job_count_ = 0;
  int job_chunks_ = 0;
  std::vector<std::exception_ptr> chunk_errors_;  // one slot per chunk, sized once

  std::atomic<uint64_t> generation_{0};  // bumped once per job; workers run when it changes
  // The current job's claim state: job number (bits 32..63), chunk count (16..31), next unclaimed
  // chunk (0..15). A successful claim (compare-exchange) guarantees the job fields above belong
  // to that job until the claimed chunk is finished: the caller waits for every chunk.
  std::atomic<uint64_t> ticket_{0};
  uint32_t job_number_ = 0;                // caller only
  std::atomic<int> finished_chunks_{0};    // of the current job
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stopping_{false};  // set before the final generation bump; lagging workers read it any time
  std::atomic<int> warm_scopes_{0};
  std::mutex wake_mutex_;
  std::condition_variable wake_workers_;
  std::condition_variable wake_caller_;
  std::mutex caller_mutex_;  // one outside caller at a time
};

// Threads for the default pool: DEEPINFER_THREADS when set (a positive integer, else it throws
// deepinfer::Error naming the variable), otherwise std::thread::hardware_concurrency().
int default_thread_count();

// The process-wide pool, created on first use with default_thread_count() threads; while a
// ScopedDefaultThreadPool is alive, the pool it names instead.
ThreadPool& default_thread_pool();

// Makes default_thread_pool() return `pool` (for every thread) until destroyed, so a test or a
// benchmark can run the same kernels and model code under several pool sizes in one process.
// Not for concurrent use: the override is process-wide; scopes nest and must end in reverse order.
class ScopedDefaultThreadPool {
 public:
  explicit ScopedDefaultThreadPool(ThreadPool& pool);
  ~ScopedDefaultThreadPool();
  ScopedDefaultThreadPool(const ScopedDefaultThreadPool&) = delete;
  ScopedDefaultThreadPool& operator=(const ScopedDefaultThreadPool&) = delete;

 private:
  ThreadPool* previous_;
};

}  // namespace deepinfer

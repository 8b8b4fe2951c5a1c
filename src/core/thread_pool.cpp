#include "core/thread_pool.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace deepinfer {
namespace {

// True on pool workers and on a caller while it runs its own chunk: parallel_for from there runs
// inline, so nested parallelism can never wait on a worker that is waiting on it.
thread_local bool t_inside_pool = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int threads, int spin_iterations) : spin_iterations_(std::max(spin_iterations, 0)) {
  if (threads < 1) fail("ThreadPool: thread count must be at least 1, got ", threads);
  // The claim ticket counts chunks in 16 bits.
  if (threads > 0xFFFF / kMaxChunksPerThread)
    fail("ThreadPool: thread count must be at most ", 0xFFFF / kMaxChunksPerThread, ", got ", threads);
  chunk_errors_.resize(static_cast<std::size_t>(threads) * kMaxChunksPerThread);
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int index = 1; index < threads; ++index) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard caller_lock(caller_mutex_);
    stopping_ = true;
    std::lock_guard wake_lock(wake_mutex_);
    generation_.fetch_add(1);
  }
  wake_workers_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_chunk(int index) {
  const auto [begin, end] = chunk_bounds(job_count_, job_chunks_, index);
  try {
    job_function_(job_callable_, begin, end);
  } catch (...) {
    chunk_errors_[static_cast<std::size_t>(index)] = std::current_exception();
  }
}

void ThreadPool::run_claimed_chunks() {
  uint64_t ticket = ticket_.load(std::memory_order_acquire);
  for (;;) {
    const auto chunks = static_cast<int>((ticket >> 16) & 0xFFFF);
    const auto next = static_cast<int>(ticket & 0xFFFF);
    if (next >= chunks) return;
    if (!ticket_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;  // `ticket` now holds the current value
    run_chunk(next);
    // seq_cst pairs with the caller's flag-then-check: either it sees this count or we see it asleep.
    if (finished_chunks_.fetch_add(1) + 1 == chunks && caller_sleeping_.load()) {
      { std::lock_guard lock(wake_mutex_); }  // the caller is inside wait() or re-checks after us
      wake_caller_.notify_one();
    }
    ticket = ticket_.load(std::memory_order_acquire);
  }
}

template <typename Done>
bool ThreadPool::spin_until(Done&& done) const {
  for (int spin = 0; spin < spin_iterations_; ++spin) {
    if (done()) return true;
    cpu_relax();
  }
  if (warm_scopes_.load(std::memory_order_relaxed) == 0) return done();
  // Pause-loop polls first (a decode step's serial stretches between regions are microseconds),
  // then polls that yield the core between rounds: on a machine whose cores are all in use (the
  // server's HTTP threads, other processes) a waiting worker must not take a core from the work
  // it waits for.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int spin = 0; spin < 256; ++spin) {
      if (done()) return true;
      cpu_relax();
    }
    if (warm_scopes_.load(std::memory_order_relaxed) == 0) return done();
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= kWarmSpinLimit) return done();
    if (waited >= kWarmPauseLimit) std::this_thread::yield();
  }
}

void ThreadPool::worker_loop() {
  t_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    uint64_t generation = seen;
    spin_until([&] {
      generation = generation_.load(std::memory_order_acquire);
      return generation != seen;
    });
    if (generation == seen) {
      std::unique_lock lock(wake_mutex_);
      // seq_cst pairs with the caller's bump-then-read: either it sees us asleep and notifies,
      // or our re-check below sees its new generation.
      sleeping_workers_.fetch_add(1);
      wake_workers_.wait(lock, [&] { return generation_.load() != seen; });
      sleeping_workers_.fetch_sub(1);
      generation = generation_.load();
    }
    seen = generation;
    if (stopping_) return;
    run_claimed_chunks();
  }
}

void ThreadPool::run(int64_t count, void* callable, ChunkFunction function, int chunks_per_thread) {
  if (chunks_per_thread < 1 || chunks_per_thread > kMaxChunksPerThread)
    fail("ThreadPool: chunks per thread must be from 1 to ", kMaxChunksPerThread, ", got ", chunks_per_thread);
  if (count <= 0) return;
  if (t_inside_pool || workers_.empty() || count == 1) {
    function(callable, 0, count);
    return;
  }
  std::lock_guard caller_lock(caller_mutex_);
  job_callable_ = callable;
  job_function_ = function;
  job_count_ = count;
  job_chunks_ = static_cast<int>(std::min<int64_t>(count, int64_t{size()} * chunks_per_thread));
  finished_chunks_.store(0, std::memory_order_relaxed);
  ++job_number_;
  // Chunk 0 is the caller's: the ticket starts at chunk 1.
  ticket_.store((uint64_t{job_number_} << 32) | (static_cast<uint64_t>(job_chunks_) << 16) | 1, std::memory_order_release);
  generation_.fetch_add(1);
  if (sleeping_workers_.load() > 0) {
    { std::lock_guard lock(wake_mutex_); }  // a worker between its check and its wait sees the bump
    wake_workers_.notify_all();
  }

  t_inside_pool = true;
  run_chunk(0);
  finished_chunks_.fetch_add(1);
  run_claimed_chunks();
  t_inside_pool = false;

  // Only chunks that workers claimed and are still running are left to wait for.
  if (!spin_until([&] { return finished_chunks_.load(std::memory_order_acquire) == job_chunks_; })) {
    std::unique_lock lock(wake_mutex_);
    caller_sleeping_.store(true);
    wake_caller_.wait(lock, [&] { return finished_chunks_.load() == job_chunks_; });
    caller_sleeping_.store(false);
  }

  std::exception_ptr first_error;
  for (int index = 0; index < job_chunks_; ++index) {
    auto& error = chunk_errors_[static_cast<std::size_t>(index)];
    if (error && !first_error) first_error = error;
    error = nullptr;
  }
  if (first_error) std::rethrow_exception(first_error);
}

int default_thread_count() {
  if (const char* text = std::getenv("DEEPINFER_THREADS"); text != nullptr && *text != '\0') {
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || value < 1 || value > 4096)
      fail("DEEPINFER_THREADS must be an integer from 1 to 4096, got '", text, "'");
    return static_cast<int>(value);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {
std::atomic<ThreadPool*> g_default_pool_override{nullptr};
}  // namespace

ThreadPool& default_thread_pool() {
  if (ThreadPool* chosen = g_default_pool_override.load(std::memory_order_acquire)) return *chosen;
  static ThreadPool pool(default_thread_count());
  return pool;
}

ScopedDefaultThreadPool::ScopedDefaultThreadPool(ThreadPool& pool)
    : previous_(g_default_pool_override.exchange(&pool, std::memory_order_acq_rel)) {}

ScopedDefaultThreadPool::~ScopedDefaultThreadPool() { g_default_pool_override.store(previous_, std::memory_order_release); }

}  // namespace deepinfer

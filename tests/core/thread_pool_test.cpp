#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"

namespace deepinfer {
namespace {

// Every index in [0, count) is visited exactly once, by chunks that are contiguous and that
// match chunk_bounds.
void expect_exact_cover(ThreadPool& pool, int64_t count, int chunks_per_thread = 1) {
  std::vector<std::atomic<int>> visits(static_cast<std::size_t>(count));
  std::atomic<int64_t> calls{0};
  pool.parallel_for(count, [&](int64_t begin, int64_t end) {
    ASSERT_LT(begin, end);
    calls.fetch_add(1);
    for (int64_t i = begin; i < end; ++i) visits[static_cast<std::size_t>(i)].fetch_add(1);
  }, chunks_per_thread);
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(visits[static_cast<std::size_t>(i)].load(), 1) << "index " << i << " of " << count;
  // Inline (one thread, or one item): a single call.
  const int64_t expected_chunks = count == 0 ? 0
                                  : pool.size() == 1 || count == 1
                                      ? 1
                                      : std::min<int64_t>(count, int64_t{pool.size()} * chunks_per_thread);
  EXPECT_EQ(calls.load(), expected_chunks) << count << " items, " << chunks_per_thread << " chunks a thread";
}

TEST(ThreadPool, CoversEveryIndexOnceForManyCountsAndSizes) {
  for (int threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t count : {0, 1, 2, 3, 5, 6, 7, 8, 13, 64, 100, 1000, 4097})
      for (int chunks_per_thread : {1, 3, ThreadPool::kMaxChunksPerThread}) expect_exact_cover(pool, count, chunks_per_thread);
  }
}

TEST(ThreadPool, FinerChunksFollowChunkBounds) {
  ThreadPool pool(3);
  std::vector<std::pair<int64_t, int64_t>> seen;
  std::mutex mutex;
  pool.parallel_for(100, [&](int64_t begin, int64_t end) {
    std::lock_guard lock(mutex);
    seen.emplace_back(begin, end);
  }, 4);
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), 12u);
  for (int64_t index = 0; index < 12; ++index) EXPECT_EQ(seen[static_cast<std::size_t>(index)], ThreadPool::chunk_bounds(100, 12, index));
}

TEST(ThreadPool, RejectsChunksPerThreadOutOfRange) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(10, [](int64_t, int64_t) {}, 0), Error);
  EXPECT_THROW(pool.parallel_for(10, [](int64_t, int64_t) {}, ThreadPool::kMaxChunksPerThread + 1), Error);
  expect_exact_cover(pool, 10);
}

TEST(ThreadPool, SleepingWorkersWakeUp) {
  ThreadPool pool(3, /*spin_iterations=*/0);  // every wait goes through the condition variables
  for (int round = 0; round < 200; ++round) expect_exact_cover(pool, 1 + round % 17);
}

TEST(ThreadPool, WarmScopesKeepEveryJobCorrect) {
  // Jobs back to back, after pauses shorter and longer than the warm spin limit (the worker then
  // falls asleep mid-scope), inside nested scopes and after they end.
  ThreadPool pool(3, /*spin_iterations=*/0);
  {
    ThreadPool::Warm outer(pool);
    for (int round = 0; round < 100; ++round) expect_exact_cover(pool, 1 + round % 17);
    {
      ThreadPool::Warm inner(pool);
      for (int round = 0; round < 3; ++round) {
        std::this_thread::sleep_for(ThreadPool::kWarmSpinLimit * 2);
        expect_exact_cover(pool, 64);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    expect_exact_cover(pool, 100);
  }
  for (int round = 0; round < 50; ++round) expect_exact_cover(pool, 1 + round % 5);
}

TEST(ThreadPool, ChunksAreStaticAndDeterministic) {
  ThreadPool pool(4);
  for (int64_t count : {5, 10, 4097}) {
    std::vector<std::pair<int64_t, int64_t>> first, second;
    std::mutex mutex;
    auto record = [&](std::vector<std::pair<int64_t, int64_t>>& into) {
      pool.parallel_for(count, [&](int64_t begin, int64_t end) {
        std::lock_guard lock(mutex);
        into.emplace_back(begin, end);
      });
      std::sort(into.begin(), into.end());
    };
    record(first);
    record(second);
    EXPECT_EQ(first, second);
    ASSERT_EQ(first.size(), 4u);
    for (int64_t index = 0; index < 4; ++index) EXPECT_EQ(first[static_cast<std::size_t>(index)], ThreadPool::chunk_bounds(count, 4, index));
  }
}

TEST(ThreadPool, UsesSeveralThreadsAndTheCaller) {
  ThreadPool pool(3, /*spin_iterations=*/0);
  std::mutex mutex;
  std::set<std::thread::id> ids;
  std::atomic<int> arrived{0};
  pool.parallel_for(3, [&](int64_t, int64_t) {
    // Each chunk waits for the other two, which only works if three threads run them at once.
    arrived.fetch_add(1);
    while (arrived.load() < 3) std::this_thread::yield();
    std::lock_guard lock(mutex);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 1u);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> visits(30 * 7);
  pool.parallel_for(30, [&](int64_t begin, int64_t end) {
    for (int64_t outer = begin; outer < end; ++outer) {
      const auto me = std::this_thread::get_id();
      int inner_calls = 0;
      pool.parallel_for(7, [&](int64_t inner_begin, int64_t inner_end) {
        EXPECT_EQ(std::this_thread::get_id(), me);
        ++inner_calls;
        for (int64_t inner = inner_begin; inner < inner_end; ++inner) visits[static_cast<std::size_t>(outer * 7 + inner)].fetch_add(1);
      });
      EXPECT_EQ(inner_calls, 1);
    }
  });
  for (auto& visit : visits) EXPECT_EQ(visit.load(), 1);
}

TEST(ThreadPool, LowestFailingChunkExceptionReachesTheCallerAndPoolStaysUsable) {
  ThreadPool pool(4);
  std::atomic<int> finished{0};
  try {
    pool.parallel_for(8, [&](int64_t begin, int64_t) {
      if (begin >= 2) throw std::runtime_error("chunk at " + std::to_string(begin));
      finished.fetch_add(1);
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "chunk at 2");  // chunks start at 0, 2, 4, 6: chunk 1 is the lowest failing
  }
  EXPECT_EQ(finished.load(), 1);
  EXPECT_THROW(pool.parallel_for(8, [](int64_t begin, int64_t) {
    if (begin == 0) throw std::logic_error("caller chunk");
  }), std::logic_error);
  // Past the first size() chunks: 32 chunks of one item, the ones from 20 on failing.
  try {
    pool.parallel_for(32, [&](int64_t begin, int64_t) {
      if (begin >= 20) throw std::runtime_error("chunk at " + std::to_string(begin));
    }, ThreadPool::kMaxChunksPerThread);
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "chunk at 20");
  }
  expect_exact_cover(pool, 1000);
}

TEST(ThreadPool, ConcurrentOutsideCallersAreSerialised) {
  ThreadPool pool(3);
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int caller = 0; caller < 4; ++caller)
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round)
        pool.parallel_for(100, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
    });
  for (auto& caller : callers) caller.join();
  EXPECT_EQ(total.load(), 4 * 50 * 100);
}

TEST(ThreadPool, RejectsZeroThreads) { EXPECT_THROW(ThreadPool(0), Error); }

TEST(ThreadPool, DefaultThreadCountReadsTheEnvironment) {
  const char* saved = std::getenv("DEEPINFER_THREADS");
  const std::string saved_value = saved ? saved : "";
  setenv("DEEPINFER_THREADS", "3", 1);
  EXPECT_EQ(default_thread_count(), 3);
  for (const char* bad : {"0", "-2", "two", "4x"}) {
    setenv("DEEPINFER_THREADS", bad, 1);
    EXPECT_THROW(default_thread_count(), Error) << bad;
  }
  unsetenv("DEEPINFER_THREADS");
  EXPECT_EQ(default_thread_count(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  if (saved) setenv("DEEPINFER_THREADS", saved_value.c_str(), 1);
}

TEST(ThreadPool, ScopedDefaultPoolOverridesAndRestores) {
  ThreadPool& process_pool = default_thread_pool();
  ThreadPool three(3);
  ThreadPool one(1);
  {
    ScopedDefaultThreadPool outer(three);
    EXPECT_EQ(&default_thread_pool(), &three);
    {
      ScopedDefaultThreadPool inner(one);
      EXPECT_EQ(&default_thread_pool(), &one);
    }
    EXPECT_EQ(&default_thread_pool(), &three);
  }
  EXPECT_EQ(&default_thread_pool(), &process_pool);
}

}  // namespace
}  // namespace deepinfer

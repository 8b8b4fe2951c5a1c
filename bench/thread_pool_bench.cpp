// Cost of one ThreadPool::parallel_for with trivial chunks, the per-call overhead a decode step
// pays hundreds of times per token: workers that spin before sleeping vs workers that sleep at once.
//
//   build/bench/thread_pool_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "core/thread_pool.h"

namespace {

void parallel_for_overhead(benchmark::State& state) {
  const int threads = static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  deepinfer::ThreadPool pool(threads, static_cast<int>(state.range(0)));
  std::atomic<int64_t> sink{0};
  for (auto _ : state) pool.parallel_for(threads, [&](int64_t begin, int64_t end) { sink.fetch_add(end - begin, std::memory_order_relaxed); });
  benchmark::DoNotOptimize(sink.load());
  state.counters["threads"] = threads;
}

}  // namespace

BENCHMARK(parallel_for_overhead)->Arg(0)->Arg(4000)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();

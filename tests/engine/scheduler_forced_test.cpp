// Jump-forward in the scheduler: tokens known without a draw, before the first one
// (RequestSpec::forced) and after a draw (StepResult::forced), taken into the plan that was built
// before they were known (take_forced_tokens), under the asynchronous loop the engine runs, with
// preemption, prefix caching, forks and cancellation. The checking executor holds every block to
// the ids of its positions; each finished sequence's tokens must be its draws and forced tokens
// in order, cut at max_tokens.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/scheduler.h"
#include "scheduler_executor.h"
#include "sanitizer_scale.h"

namespace deepinfer::engine {
namespace {

using testing::CheckingExecutor;

constexpr int64_t kForcedBlock = 4;

SchedulerConfig config_of(int64_t blocks) {
  SchedulerConfig config;
  config.block_tokens = kForcedBlock;
  config.block_bytes = kForcedBlock * 4;  // CheckingExecutor's layout: one int32 per position
  config.cache_memory_bytes = blocks * config.block_bytes;
  config.max_batch_tokens = 12;
  config.max_running_sequences = 6;
  config.state_blocks_per_sequence = 1;
  config.snapshot_bytes = CheckingExecutor::kSnapshotBytes;
  return config;
}

// One forced run after a draw, planned and then finished and taken in, synchronously: the next
// plan computes the drawn token and the run in one item, and draws after it.
TEST(SchedulerForced, AForcedRunIsComputedWithTheDrawBeforeIt) {
  Scheduler scheduler(config_of(20));
  CheckingExecutor executor(scheduler);
  RequestSpec spec;
  spec.prompt = {1, 2, 3};
  spec.max_tokens = 10;
  scheduler.add_request(spec);
  StepPlan first = scheduler.schedule();
  std::vector<StepResult> results = executor.launch(first);
  ASSERT_EQ(results.size(), 1u);
  StepPlan second = scheduler.schedule();  // planned while `first` computes: the draw is pending
  ASSERT_EQ(second.sequences.size(), 1u);
  EXPECT_EQ(second.sequences[0].tokens, std::vector<int32_t>{kPendingToken});
  results[0].forced = {5, 6, 4};
  scheduler.on_step_finished(first.step, results);
  scheduler.take_forced_tokens(second);
  const ScheduledSequence& item = second.sequences[0];
  EXPECT_EQ(item.begin, 3);
  EXPECT_EQ(item.end, 7);
  EXPECT_EQ(item.tokens, (std::vector<int32_t>{results[0].token, 5, 6, 4}));
  EXPECT_TRUE(item.needs_logits);
  EXPECT_EQ(item.block_table.size(), 2u);
  scheduler.check_consistency();
  const std::vector<StepResult> next = executor.launch(second);
  ASSERT_EQ(next.size(), 1u);
  scheduler.on_step_finished(second.step, next);
  scheduler.check_consistency();
  EXPECT_EQ(scheduler.sequence(item.id)->tokens.size(), 8u);
}

// A run longer than the step's budget: the item computes what fits and draws nothing; later
// plans compute the rest as a chunk and draw at its end.
TEST(SchedulerForced, ARunPastTheBudgetIsFinishedByLaterChunks) {
  Scheduler scheduler(config_of(20));
  CheckingExecutor executor(scheduler);
  RequestSpec spec;
  spec.prompt = {1, 2, 3};
  spec.max_tokens = 40;
  const RequestId id = scheduler.add_request(spec);
  StepPlan first = scheduler.schedule();
  std::vector<StepResult> results = executor.launch(first);
  StepPlan second = scheduler.schedule();
  results[0].forced = std::vector<int32_t>(20, 2);
  scheduler.on_step_finished(first.step, results);
  scheduler.take_forced_tokens(second);
  EXPECT_EQ(second.sequences[0].end - second.sequences[0].begin, 12);  // the whole budget
  EXPECT_FALSE(second.sequences[0].needs_logits);
  EXPECT_TRUE(executor.launch(second).empty());
  scheduler.on_step_finished(second.step, {});
  scheduler.check_consistency();
  int64_t draws = 0;
  for (int step = 0; step < 4 && draws == 0; ++step) {
    const StepPlan plan = scheduler.schedule();
    const std::vector<StepResult> drawn = executor.launch(plan);
    draws += static_cast<int64_t>(drawn.size());
    scheduler.on_step_finished(plan.step, drawn);
    scheduler.check_consistency();
  }
  EXPECT_EQ(draws, 1);
  EXPECT_EQ(scheduler.sequence({id, 0})->tokens.size(), 3u + 1 + 20 + 1);
}

TEST(SchedulerForced, RefusesForcedTokensThatLeaveNoDraw) {
  Scheduler scheduler(config_of(20));
  RequestSpec spec;
  spec.prompt = {1};
  spec.max_tokens = 2;
  spec.forced = {3, 4};
  EXPECT_THROW(scheduler.add_request(spec), Error);
}

// The engine's loop with random forced tokens everywhere; every block checked by the executor,
// the books checked after every step, and each sequence's tokens checked at its end.
TEST(SchedulerForced, RandomAsynchronousRunKeepsEveryBlockExact) {
  std::mt19937 rng(17);
  Scheduler scheduler(config_of(24));  // tight: sequences that grow are preempted
  CheckingExecutor executor(scheduler, 3);
  std::map<SequenceId, std::vector<int32_t>> expected;  // generated tokens so far, as given
  std::map<RequestId, int64_t> max_tokens;
  std::vector<RequestId> live;
  int64_t finished = 0;
  int64_t forced_total = 0;
  std::optional<StepPlan> in_flight;
  std::vector<StepResult> in_flight_results;
  const auto give = [&](std::vector<StepResult>& results) {
    for (StepResult& result : results) {
      result.stop = rng() % 100 < 5;
      if (!result.stop && rng() % 2 == 0)
        for (int64_t k = 0, n = static_cast<int64_t>(rng() % 9); k < n; ++k)
          result.forced.push_back(static_cast<int32_t>(rng() % 3));
      if (!scheduler.is_current(result.id, scheduler.sequence(result.id) ? scheduler.sequence(result.id)->epoch : 0))
        continue;
      std::vector<int32_t>& tokens = expected[result.id];
      tokens.push_back(result.token);
      for (int32_t token : result.forced)
        if (static_cast<int64_t>(tokens.size()) < max_tokens.at(result.id.request)) tokens.push_back(token);
      forced_total += static_cast<int64_t>(result.forced.size());
    }
  };
  const auto check_finished = [&](const StepOutcome& outcome) {
    for (const FinishedSequence& done : outcome.finished) {
      EXPECT_EQ(done.generated, expected.at(done.id)) << "request " << done.id.request << " choice " << done.id.choice;
      if (done.reason == SequenceEnd::length) {
        EXPECT_EQ(static_cast<int64_t>(done.generated.size()), max_tokens.at(done.id.request));
      }
      ++finished;
    }
  };
  const int steps = deepinfer::testing::release_or_sanitized(1200, 400);
  for (int step = 0; step < steps; ++step) {
    if (step < steps - 200 && rng() % 3 != 0) {
      RequestSpec spec;
      for (int64_t i = 0, n = 1 + static_cast<int64_t>(rng() % 10); i < n; ++i)
        spec.prompt.push_back(static_cast<int32_t>(rng() % 3));
      spec.max_tokens = 2 + static_cast<int64_t>(rng() % 24);
      spec.n = rng() % 5 == 0 ? 2 : 1;
      if (rng() % 3 == 0)
        for (int64_t i = 0, n = static_cast<int64_t>(rng() % static_cast<uint64_t>(spec.max_tokens)); i < n; ++i)
          spec.forced.push_back(static_cast<int32_t>(rng() % 3));
      const RequestId id = scheduler.add_request(spec);
      max_tokens[id] = spec.max_tokens;
      for (int32_t choice = 0; choice < spec.n; ++choice) expected[{id, choice}] = spec.forced;
      live.push_back(id);
    }
    if (!live.empty() && rng() % 10 == 0) {
      const std::size_t pick = rng() % live.size();
      scheduler.cancel(live[pick]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    StepPlan plan = scheduler.schedule();  // while step N computes
    if (in_flight) {
      give(in_flight_results);
      check_finished(scheduler.on_step_finished(in_flight->step, in_flight_results));
      scheduler.take_forced_tokens(plan);
    }
    ASSERT_LE(plan.tokens(), scheduler.config().max_batch_tokens);
    scheduler.check_consistency();
    in_flight_results = executor.launch(plan);
    in_flight = std::move(plan);
    if (::testing::Test::HasFailure()) return;
  }
  give(in_flight_results);
  check_finished(scheduler.on_step_finished(in_flight->step, in_flight_results));
  for (int step = 0; step < 2000; ++step) {
    const SchedulerCounters counters = scheduler.counters();
    if (counters.running == 0 && counters.waiting == 0) break;
    StepPlan plan = scheduler.schedule();
    std::vector<StepResult> results = executor.launch(plan);
    give(results);
    check_finished(scheduler.on_step_finished(plan.step, results));
    scheduler.check_consistency();
  }
  const SchedulerCounters counters = scheduler.counters();
  EXPECT_EQ(counters.running + counters.waiting, 0);
  EXPECT_GT(counters.preemptions, 0);
  EXPECT_GT(counters.prefix_hit_tokens, 0);
  EXPECT_GT(finished, 30);
  EXPECT_GT(forced_total, 100);
}

}  // namespace
}  // namespace deepinfer::engine

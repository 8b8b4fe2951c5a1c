// Speculative decoding in the scheduler: draft positions granted to the plan built before the
// drafts existed (take_drafts, within the budget kept for them and max_tokens), and the two ways
// a verification leaves a sequence (StepResult::computed: past every draft, or rolled back to
// the item's begin with the kept tokens to compute again), taken into the next plan
// (take_forced_tokens), under the asynchronous loop the engine runs, with preemption, prefix
// caching, forks and cancellation. Whatever was drafted and kept, each finished sequence's tokens
// must be the target's own chain, cut at max_tokens or a stop.
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

constexpr int64_t kDraftBlock = 4;
constexpr int32_t kDrafts = 3;

SchedulerConfig speculative_config(int64_t blocks) {
  SchedulerConfig config;
  config.block_tokens = kDraftBlock;
  config.block_bytes = kDraftBlock * 4;
  config.cache_memory_bytes = blocks * config.block_bytes;
  config.max_batch_tokens = 16;
  config.max_running_sequences = 6;
  config.state_blocks_per_sequence = 1;
  config.snapshot_bytes = CheckingExecutor::kSnapshotBytes;
  return config;
}

std::vector<DraftOffer> offer_all(const StepPlan& plan, int32_t drafts) {
  std::vector<DraftOffer> offers;
  for (const ScheduledSequence& item : plan.sequences)
    if (item.needs_logits) offers.push_back({item.id, drafts});
  return offers;
}

TEST(SchedulerSpeculative, DraftsUseTheKeptBudgetAndRollbacksAreComputedAgain) {
  Scheduler scheduler(speculative_config(40));
  CheckingExecutor executor(scheduler);
  RequestSpec spec;
  spec.prompt = {1, 2, 3};
  spec.max_tokens = 20;
  spec.draft_tokens = kDrafts;
  const RequestId id = scheduler.add_request(spec);
  StepPlan first = scheduler.schedule();
  ASSERT_EQ(first.sequences.size(), 1u);
  EXPECT_EQ(first.sequences[0].draft_room, kDrafts);  // kept from the budget for later drafts
  EXPECT_EQ(scheduler.free_budget(first), 16 - 3 - kDrafts);
  std::vector<StepResult> results = executor.launch(first);
  StepPlan second = scheduler.schedule();  // while `first` computes: its token is pending
  scheduler.on_step_finished(first.step, results);
  scheduler.take_forced_tokens(second);
  scheduler.take_drafts(second, offer_all(second, 10));
  ASSERT_EQ(second.sequences.size(), 1u);
  EXPECT_EQ(second.sequences[0].drafts, kDrafts) << "no more than the budget kept for them";
  EXPECT_EQ(second.sequences[0].begin, 3);
  EXPECT_EQ(second.sequences[0].end, 4);

  // One draft right, then a wrong one: the state rolls back to 3 and the next plan computes the
  // anchor, the kept draft and the bonus again, with new drafts after them.
  executor.right_drafts = [](SequenceId, int32_t) { return 1; };
  results = executor.launch(second);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].computed, 3);
  EXPECT_EQ(results[0].forced.size(), 1u);  // the bonus after the kept draft
  StepPlan third = scheduler.schedule();
  scheduler.on_step_finished(second.step, results);
  EXPECT_EQ(scheduler.sequence({id, 0})->computed_tokens, 3);
  scheduler.take_forced_tokens(third);
  scheduler.take_drafts(third, offer_all(third, 2));
  ASSERT_EQ(third.sequences.size(), 1u);
  EXPECT_EQ(third.sequences[0].begin, 3);
  EXPECT_EQ(third.sequences[0].end, 6);
  EXPECT_EQ(third.sequences[0].drafts, 2);
  scheduler.check_consistency();

  // Every draft right: the state is past them, and the next plan starts at the bonus.
  executor.right_drafts = [](SequenceId, int32_t drafts) { return drafts; };
  results = executor.launch(third);
  EXPECT_EQ(results[0].computed, 8);
  StepPlan fourth = scheduler.schedule();
  scheduler.on_step_finished(third.step, results);
  scheduler.take_forced_tokens(fourth);
  ASSERT_EQ(fourth.sequences.size(), 1u);
  EXPECT_EQ(fourth.sequences[0].begin, 8);
  EXPECT_EQ(fourth.sequences[0].end, 9);
  scheduler.check_consistency();

  // Near max_tokens the drafts shrink so that the kept ones and the bonus fit.
  const int64_t generated = static_cast<int64_t>(scheduler.sequence({id, 0})->tokens.size()) - 3;
  EXPECT_EQ(generated, 6);
}

TEST(SchedulerSpeculative, AResultOutsideWhatItsWorkCouldLeaveIsRefused) {
  Scheduler scheduler(speculative_config(40));
  CheckingExecutor executor(scheduler);
  RequestSpec spec;
  spec.prompt = {1, 2, 3};
  spec.max_tokens = 20;
  spec.draft_tokens = kDrafts;
  scheduler.add_request(spec);
  StepPlan first = scheduler.schedule();
  std::vector<StepResult> results = executor.launch(first);
  results[0].computed = 3;  // a step without drafts cannot report a moved state
  EXPECT_THROW(scheduler.on_step_finished(first.step, results), Error);
}

TEST(SchedulerSpeculative, RandomWorkloadsKeepTheTargetsChain) {
  std::mt19937_64 rng(20261203);
  Scheduler scheduler(speculative_config(36));
  CheckingExecutor executor(scheduler);
  executor.right_drafts = [&rng](SequenceId, int32_t drafts) {
    return static_cast<int32_t>(rng() % static_cast<uint64_t>(drafts + 1));
  };
  std::map<RequestId, RequestSpec> specs;
  std::vector<RequestId> live;
  int64_t finished = 0;
  // Each finished sequence's tokens: the target's chain from its prompt, whatever was drafted.
  const auto check_finished = [&](const StepOutcome& outcome) {
    for (const FinishedSequence& done : outcome.finished) {
      const RequestSpec& spec = specs.at(done.id.request);
      std::vector<int32_t> state = spec.prompt;
      for (std::size_t i = 0; i < done.generated.size(); ++i) {
        ASSERT_EQ(done.generated[i], executor.target_token(done.id, state))
            << "request " << done.id.request << " choice " << done.id.choice << " token " << i;
        state.push_back(done.generated[i]);
      }
      if (done.reason == SequenceEnd::length) {
        EXPECT_EQ(static_cast<int64_t>(done.generated.size()), spec.max_tokens);
      }
      ++finished;
    }
  };
  std::optional<StepPlan> in_flight;
  std::vector<StepResult> in_flight_results;
  const int steps = deepinfer::testing::release_or_sanitized(1500, 400);
  for (int step = 0; step < steps; ++step) {
    if (step < steps - 200 && rng() % 3 != 0) {
      RequestSpec spec;
      for (int64_t i = 0, n = 1 + static_cast<int64_t>(rng() % 12); i < n; ++i)
        spec.prompt.push_back(static_cast<int32_t>(rng() % 3));
      spec.max_tokens = 1 + static_cast<int64_t>(rng() % 24);
      spec.n = rng() % 5 == 0 ? 2 : 1;
      spec.draft_tokens = rng() % 4 == 0 ? 0 : kDrafts;
      const RequestId id = scheduler.add_request(spec);
      specs[id] = spec;
      live.push_back(id);
    }
    if (!live.empty() && rng() % 12 == 0) {
      const std::size_t pick = rng() % live.size();
      scheduler.cancel(live[pick]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    StepPlan plan = scheduler.schedule();  // while step N computes
    if (in_flight) {
      executor.decide_stops(in_flight_results, rng, 3);
      check_finished(scheduler.on_step_finished(in_flight->step, in_flight_results));
      scheduler.take_forced_tokens(plan);
      if (plan.empty()) plan = scheduler.schedule();
    }
    scheduler.take_drafts(plan, offer_all(plan, static_cast<int32_t>(rng() % (kDrafts + 2))));
    ASSERT_LE(plan.tokens(), scheduler.config().max_batch_tokens);
    scheduler.check_consistency();
    in_flight_results = executor.launch(plan);
    in_flight = std::move(plan);
    if (::testing::Test::HasFailure()) return;
  }
  check_finished(scheduler.on_step_finished(in_flight->step, in_flight_results));
  for (int step = 0; step < 3000; ++step) {
    const SchedulerCounters counters = scheduler.counters();
    if (counters.running == 0 && counters.waiting == 0) break;
    StepPlan plan = scheduler.schedule();
    scheduler.take_drafts(plan, offer_all(plan, kDrafts));
    std::vector<StepResult> results = executor.launch(plan);
    check_finished(scheduler.on_step_finished(plan.step, results));
    scheduler.check_consistency();
    if (::testing::Test::HasFailure()) return;
  }
  const SchedulerCounters counters = scheduler.counters();
  EXPECT_EQ(counters.running + counters.waiting, 0);
  EXPECT_GT(counters.preemptions, 0);
  EXPECT_GT(counters.prefix_hit_tokens, 0);
  EXPECT_GT(finished, 50);
  EXPECT_GT(executor.rollbacks, 100);
  EXPECT_GT(executor.kept_drafts, 100);
}

}  // namespace
}  // namespace deepinfer::engine

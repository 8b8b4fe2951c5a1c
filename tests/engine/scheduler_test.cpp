#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "engine/scheduler_executor.h"

namespace deepinfer::engine {
namespace {

using testing::CheckingExecutor;

constexpr int64_t kBlock = 4;

SchedulerConfig small_config(int64_t blocks, int64_t batch_tokens = 16, int32_t max_running = 8) {
  SchedulerConfig config;
  config.block_tokens = kBlock;
  config.block_bytes = kBlock * 4;  // one int32 per position: CheckingExecutor's layout
  config.cache_memory_bytes = blocks * config.block_bytes;
  config.max_batch_tokens = batch_tokens;
  config.max_running_sequences = max_running;
  config.state_blocks_per_sequence = 1;
  config.snapshot_bytes = CheckingExecutor::kSnapshotBytes;
  return config;
}

std::vector<int32_t> tokens(int64_t count, int32_t first) {
  std::vector<int32_t> out(static_cast<std::size_t>(count));
  std::iota(out.begin(), out.end(), first);
  return out;
}

RequestSpec request(std::vector<int32_t> prompt, int64_t max_tokens, int32_t priority = 0, int32_t n = 1) {
  RequestSpec spec;
  spec.prompt = std::move(prompt);
  spec.max_tokens = max_tokens;
  spec.priority = priority;
  spec.n = n;
  return spec;
}

// Runs synchronously until nothing is left; returns the finished sequences in finishing order.
std::vector<FinishedSequence> run_to_completion(Scheduler& scheduler, CheckingExecutor& executor, int max_steps = 1000) {
  std::vector<FinishedSequence> finished;
  for (int step = 0; step < max_steps; ++step) {
    const SchedulerCounters counters = scheduler.counters();
    if (counters.running == 0 && counters.waiting == 0) return finished;
    const StepPlan plan = scheduler.schedule();
    EXPECT_LE(plan.tokens(), scheduler.config().max_batch_tokens);
    const std::vector<StepResult> results = executor.launch(plan);
    StepOutcome outcome = scheduler.on_step_finished(plan.step, results);
    scheduler.check_consistency();
    finished.insert(finished.end(), outcome.finished.begin(), outcome.finished.end());
  }
  ADD_FAILURE() << "requests did not complete in " << max_steps << " steps";
  return finished;
}

void expect_nothing_held(Scheduler& scheduler) {
  scheduler.clear_prefix_cache();
  scheduler.check_consistency();
  const SchedulerCounters counters = scheduler.counters();
  EXPECT_EQ(counters.running, 0);
  EXPECT_EQ(counters.waiting, 0);
  EXPECT_EQ(counters.in_use_blocks, 0);
  EXPECT_EQ(counters.evictable_blocks, 0);
  EXPECT_EQ(counters.cached_blocks, 0);
  EXPECT_EQ(counters.snapshots, 0);
  EXPECT_EQ(counters.snapshot_blocks, 0);
  EXPECT_EQ(counters.running_tokens, 0);
  EXPECT_EQ(counters.running_state_blocks, 0);
  EXPECT_EQ(counters.free_blocks, counters.total_blocks);
}

TEST(Scheduler, ChunkedPrefillSplitsAtBlockBoundariesWithinTheBudget) {
  Scheduler scheduler(small_config(64, 10));
  CheckingExecutor executor(scheduler);
  scheduler.add_request(request(tokens(25, 100), 2));
  std::vector<std::pair<int64_t, int64_t>> chunks;
  std::vector<bool> logits;
  for (int step = 0; step < 4; ++step) {
    const StepPlan plan = scheduler.schedule();
    ASSERT_EQ(plan.sequences.size(), 1u);
    EXPECT_LE(plan.tokens(), 10);
    chunks.emplace_back(plan.sequences[0].begin, plan.sequences[0].end);
    logits.push_back(plan.sequences[0].needs_logits);
    EXPECT_EQ(plan.sequences[0].starts, step == 0);
    EXPECT_EQ(plan.sequences[0].save_snapshot != kNoSnapshot, plan.sequences[0].end % kBlock == 0);
    scheduler.on_step_finished(plan.step, executor.launch(plan));
    scheduler.check_consistency();
  }
  // A chunk that is not the last ends on a block boundary (8 of 10, 8 of 10), and prefill stops
  // at the prompt's last full block (24) for its snapshot; then the rest.
  const std::vector<std::pair<int64_t, int64_t>> expected{{0, 8}, {8, 16}, {16, 24}, {24, 25}};
  EXPECT_EQ(chunks, expected);
  EXPECT_EQ(logits, (std::vector<bool>{false, false, false, true}));
  const StepPlan decode = scheduler.schedule();  // the sampled token's decode
  ASSERT_EQ(decode.sequences.size(), 1u);
  EXPECT_EQ(decode.sequences[0].begin, 25);
  EXPECT_EQ(decode.sequences[0].end, 26);
  EXPECT_TRUE(decode.sequences[0].needs_logits);
  const StepOutcome outcome = scheduler.on_step_finished(decode.step, executor.launch(decode));
  ASSERT_EQ(outcome.finished.size(), 1u);
  EXPECT_EQ(outcome.finished[0].reason, SequenceEnd::length);
  EXPECT_EQ(outcome.finished[0].generated.size(), 2u);
  expect_nothing_held(scheduler);
}

TEST(Scheduler, ARequestsChunkCapHoldsWhileOthersUseTheRestOfTheBudget) {
  Scheduler scheduler(small_config(64, 16));
  CheckingExecutor executor(scheduler);
  RequestSpec capped = request(tokens(13, 100), 1);
  capped.max_chunk_tokens = 3;
  const RequestId capped_id = scheduler.add_request(capped);
  scheduler.add_request(request(tokens(20, 500), 1));
  std::vector<std::pair<int64_t, int64_t>> capped_chunks;
  int64_t largest_other_chunk = 0;
  for (int step = 0; step < 100 && scheduler.counters().running + scheduler.counters().waiting > 0; ++step) {
    const StepPlan plan = scheduler.schedule();
    for (const ScheduledSequence& sequence : plan.sequences) {
      if (sequence.id.request == capped_id)
        capped_chunks.emplace_back(sequence.begin, sequence.end);
      else
        largest_other_chunk = std::max(largest_other_chunk, sequence.end - sequence.begin);
    }
    scheduler.on_step_finished(plan.step, executor.launch(plan));
    scheduler.check_consistency();
  }
  // Three positions a step, cut back to the block boundary when one lies inside (0-3 -> 0-3,
  // 3-6 -> 3-4, ...), never more than three; the other request still takes up to 13 of 16.
  ASSERT_FALSE(capped_chunks.empty());
  EXPECT_EQ(capped_chunks.front(), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(capped_chunks.back().second, 13);
  for (std::size_t i = 0; i < capped_chunks.size(); ++i) {
    EXPECT_LE(capped_chunks[i].second - capped_chunks[i].first, 3);
    if (i > 0) {
      EXPECT_EQ(capped_chunks[i].first, capped_chunks[i - 1].second);
    }
  }
  EXPECT_GT(largest_other_chunk, 3);
  RequestSpec negative = request(tokens(4, 1), 1);
  negative.max_chunk_tokens = -1;
  EXPECT_THROW(scheduler.add_request(negative), Error);
  expect_nothing_held(scheduler);
}

// Prompts that share a system prompt and then differ: the first caches its whole prompt, the
// second finds the shared blocks without a snapshot at their end, stops its prefill there and
// caches that boundary's snapshot, and the third resumes from it.
TEST(Scheduler, ThePartTwoPromptsShareBecomesResumableForTheThird) {
  Scheduler scheduler(small_config(64, 64));
  CheckingExecutor executor(scheduler);
  const std::vector<int32_t> system = tokens(10, 1);  // blocks 0-3, 4-7 whole; 8-9 inside block 2
  auto prompt_with = [&](int32_t tail) {
    std::vector<int32_t> prompt = system;
    for (int32_t i = 0; i < 7; ++i) prompt.push_back(tail + i);
    return prompt;
  };
  std::vector<std::pair<int64_t, int64_t>> chunks;
  std::vector<int64_t> hits;
  for (const int32_t tail : {100, 200, 300, 400}) {
    const int64_t hit_before = scheduler.counters().prefix_hit_tokens;
    scheduler.add_request(request(prompt_with(tail), 2));
    chunks.clear();
    for (int step = 0; step < 20 && scheduler.counters().running + scheduler.counters().waiting > 0; ++step) {
      const StepPlan plan = scheduler.schedule();
      for (const ScheduledSequence& sequence : plan.sequences) chunks.emplace_back(sequence.begin, sequence.end);
      scheduler.on_step_finished(plan.step, executor.launch(plan));
      scheduler.check_consistency();
    }
    hits.push_back(scheduler.counters().prefix_hit_tokens - hit_before);
    if (tail == 200) {  // stops at the shared boundary (8), then the prompt's last full block (16)
      ASSERT_GE(chunks.size(), 2u);
      EXPECT_EQ(chunks[0], (std::pair<int64_t, int64_t>{0, 8}));
      EXPECT_EQ(chunks[1], (std::pair<int64_t, int64_t>{8, 16}));
    }
  }
  EXPECT_EQ(hits, (std::vector<int64_t>{0, 0, 8, 8}));
  EXPECT_EQ(executor.restores, 2);
  expect_nothing_held(scheduler);
}

TEST(Scheduler, DecodesComeFirstAndTheBudgetHoldsWithManySequences) {
  Scheduler scheduler(small_config(200, 8));
  CheckingExecutor executor(scheduler);
  for (int i = 0; i < 3; ++i) scheduler.add_request(request(tokens(2, 10 * i), 20));
  // Three 2-token prompts in one step, then three decodes per step.
  StepPlan plan = scheduler.schedule();
  EXPECT_EQ(plan.sequences.size(), 3u);
  EXPECT_EQ(scheduler.counters().running_tokens, 0);  // planned, not computed yet
  EXPECT_EQ(scheduler.counters().running_state_blocks, 3);
  scheduler.on_step_finished(plan.step, executor.launch(plan));
  EXPECT_EQ(scheduler.counters().running_tokens, 3 * 2);
  scheduler.add_request(request(tokens(30, 500), 2));
  plan = scheduler.schedule();
  ASSERT_EQ(plan.sequences.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.sequences[static_cast<std::size_t>(i)].end - plan.sequences[static_cast<std::size_t>(i)].begin, 1);
    EXPECT_EQ(plan.sequences[static_cast<std::size_t>(i)].id.request, i);
  }
  EXPECT_EQ(plan.sequences[3].id.request, 3);
  EXPECT_EQ(plan.sequences[3].begin, 0);
  EXPECT_EQ(plan.sequences[3].end, 4);  // 5 tokens left, aligned down to a block boundary
  EXPECT_EQ(plan.tokens(), 7);
  scheduler.on_step_finished(plan.step, executor.launch(plan));
  EXPECT_EQ(scheduler.counters().running_tokens, 3 * 3 + 4);
  EXPECT_EQ(scheduler.counters().running_state_blocks, 4);
  run_to_completion(scheduler, executor);
  expect_nothing_held(scheduler);
}

TEST(Scheduler, PrioritiesFirstThenArrivalOrder) {
  Scheduler scheduler(small_config(64, 64, 1));
  CheckingExecutor executor(scheduler);
  const RequestId late_low = scheduler.add_request(request(tokens(3, 1), 1, 5));
  const RequestId first_high = scheduler.add_request(request(tokens(3, 2), 1, 0));
  const RequestId second_high = scheduler.add_request(request(tokens(3, 3), 1, 0));
  const RequestId middle = scheduler.add_request(request(tokens(3, 4), 1, 2));
  std::vector<RequestId> order;
  for (const FinishedSequence& done : run_to_completion(scheduler, executor)) order.push_back(done.id.request);
  EXPECT_EQ(order, (std::vector<RequestId>{first_high, second_high, middle, late_low}));
  expect_nothing_held(scheduler);
}

TEST(Scheduler, PreemptsTheLeastImportantAndStillCompletesEveryRequest) {
  // 14 blocks: each request alone needs 1 state + 5 position blocks, three cannot run together.
  SchedulerConfig config = small_config(14, 32);
  config.prefix_caching = false;
  Scheduler scheduler(config);
  CheckingExecutor executor(scheduler);
  for (int i = 0; i < 3; ++i) scheduler.add_request(request(tokens(8, 100 * i), 12));
  bool saw_preemption = false;
  std::vector<FinishedSequence> finished;
  for (int step = 0; step < 500 && (scheduler.counters().running + scheduler.counters().waiting) > 0; ++step) {
    const int64_t preemptions_before = scheduler.counters().preemptions;
    const StepPlan plan = scheduler.schedule();
    if (scheduler.counters().preemptions > preemptions_before) {
      saw_preemption = true;
      // The victim is the latest arrival among the running ones; the oldest keeps running.
      ASSERT_FALSE(plan.dropped.empty());
      EXPECT_EQ(plan.dropped.front().request, 2);
      EXPECT_EQ(scheduler.sequence({0, 0})->status, SequenceStatus::running);
    }
    const StepOutcome outcome = scheduler.on_step_finished(plan.step, executor.launch(plan));
    scheduler.check_consistency();
    finished.insert(finished.end(), outcome.finished.begin(), outcome.finished.end());
  }
  EXPECT_TRUE(saw_preemption);
  ASSERT_EQ(finished.size(), 3u);
  for (const FinishedSequence& done : finished) EXPECT_EQ(done.generated.size(), 12u);
  expect_nothing_held(scheduler);
}

TEST(Scheduler, PreemptedSequenceRecomputesPromptAndGeneratedTokens) {
  SchedulerConfig config = small_config(14, 32);
  config.prefix_caching = false;
  Scheduler scheduler(config);
  CheckingExecutor executor(scheduler);
  scheduler.add_request(request(tokens(8, 0), 12));
  scheduler.add_request(request(tokens(8, 50), 12));
  scheduler.add_request(request(tokens(8, 90), 12));
  std::vector<int32_t> before;
  for (int step = 0; step < 200; ++step) {
    const StepPlan plan = scheduler.schedule();
    for (const ScheduledSequence& item : plan.sequences) {
      if (item.starts && item.id.request == 2 && !before.empty()) {
        // Readmitted: recomputes from scratch the prompt plus what it had generated.
        EXPECT_EQ(item.begin, 0);
        EXPECT_EQ(scheduler.sequence(item.id)->tokens, before);
        EXPECT_GT(before.size(), 8u);
        scheduler.on_step_finished(plan.step, executor.launch(plan));
        run_to_completion(scheduler, executor);  // finishes this plan's successors too
        expect_nothing_held(scheduler);
        return;
      }
    }
    if (std::find(plan.dropped.begin(), plan.dropped.end(), SequenceId{2, 0}) != plan.dropped.end())
      before = scheduler.sequence({2, 0})->tokens;
    scheduler.on_step_finished(plan.step, executor.launch(plan));
  }
  FAIL() << "request 2 was never preempted after generating, then readmitted";
}

TEST(Scheduler, RejectsARequestThatCouldNeverFit) {
  Scheduler scheduler(small_config(6));
  // 1 state block + ceil((20 + 1 - 1) / 4) = 6 blocks: fits exactly.
  EXPECT_NO_THROW(scheduler.add_request(request(tokens(20, 0), 1)));
  try {
    scheduler.add_request(request(tokens(20, 0), 2));
    FAIL() << "accepted a request needing 7 blocks of 6";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--cache-memory"), std::string::npos) << error.what();
  }
  EXPECT_THROW(scheduler.add_request(request({}, 1)), Error);
  EXPECT_THROW(scheduler.add_request(request(tokens(2, 0), 0)), Error);
  EXPECT_THROW(scheduler.add_request(request(tokens(2, 0), 1, 0, 0)), Error);
  SchedulerConfig bad = small_config(6);
  bad.max_batch_tokens = 0;
  EXPECT_THROW(Scheduler{bad}, Error);
}

TEST(Scheduler, ReusesTheCachedPrefixOfAFinishedRequest) {
  Scheduler scheduler(small_config(64, 64));
  CheckingExecutor executor(scheduler);
  const std::vector<int32_t> first_prompt = tokens(10, 1);
  scheduler.add_request(request(first_prompt, 7));
  const std::vector<FinishedSequence> first = run_to_completion(scheduler, executor);
  ASSERT_EQ(first.size(), 1u);
  // Prompt 10 + 7 generated: positions 0..15 computed; cached with the snapshot at the prompt's
  // last full block (8) and the last one (16): 4 blocks.
  EXPECT_EQ(scheduler.counters().cached_blocks, 4);
  EXPECT_EQ(scheduler.counters().in_use_blocks, 4);  // two snapshots, 24 bytes in 2 blocks each
  EXPECT_EQ(scheduler.counters().evictable_blocks, 4);

  // The next turn resends prompt + reply and adds 3 tokens.
  std::vector<int32_t> next = first_prompt;
  next.insert(next.end(), first[0].generated.begin(), first[0].generated.end());
  for (int32_t token : {90, 91, 92}) next.push_back(token);
  scheduler.add_request(request(next, 2));
  const StepPlan plan = scheduler.schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);
  EXPECT_TRUE(plan.sequences[0].starts);
  EXPECT_NE(plan.sequences[0].restore, kNoSnapshot);
  EXPECT_EQ(plan.sequences[0].begin, 16);
  EXPECT_EQ(plan.sequences[0].end, 20);
  EXPECT_EQ(scheduler.counters().prefix_hit_tokens, 16);
  EXPECT_EQ(scheduler.counters().prefix_queried_tokens, 10 + 20);
  scheduler.on_step_finished(plan.step, executor.launch(plan));
  run_to_completion(scheduler, executor);
  EXPECT_EQ(executor.restores, 1);

  // A prompt diverging inside block 2 resumes from the first prompt's snapshot at 8.
  std::vector<int32_t> diverging(next.begin(), next.begin() + 9);
  diverging.push_back(77);
  scheduler.add_request(request(diverging, 1));
  const StepPlan resumed = scheduler.schedule();
  EXPECT_EQ(resumed.sequences[0].begin, 8);
  EXPECT_NE(resumed.sequences[0].restore, kNoSnapshot);
  scheduler.on_step_finished(resumed.step, executor.launch(resumed));
  run_to_completion(scheduler, executor);
  EXPECT_EQ(executor.restores, 2);

  // One diverging inside block 1 matches nothing: no snapshot ends at block 0.
  std::vector<int32_t> early(next.begin(), next.begin() + 5);
  early.push_back(78);
  scheduler.add_request(request(early, 1));
  const StepPlan fresh = scheduler.schedule();
  EXPECT_EQ(fresh.sequences[0].begin, 0);
  EXPECT_EQ(fresh.sequences[0].restore, kNoSnapshot);
  scheduler.on_step_finished(fresh.step, executor.launch(fresh));
  run_to_completion(scheduler, executor);
  expect_nothing_held(scheduler);
}

TEST(Scheduler, ForkedChoicesSharePromptBlocksAndCopyThePartialOne) {
  Scheduler scheduler(small_config(64, 64));
  CheckingExecutor executor(scheduler);
  const RequestId id = scheduler.add_request(request(tokens(10, 3), 6, 0, 3));
  EXPECT_EQ(scheduler.sequence({id, 1})->status, SequenceStatus::waiting_for_fork);
  // Prefill first stops at the prompt's last full block (8) for its snapshot; no fork yet.
  const StepPlan head = scheduler.schedule();
  ASSERT_EQ(head.sequences.size(), 1u);
  EXPECT_EQ(head.sequences[0].end, 8);
  EXPECT_TRUE(head.forks.empty());
  scheduler.on_step_finished(head.step, executor.launch(head));
  const StepPlan plan = scheduler.schedule();
  ASSERT_EQ(plan.sequences.size(), 1u);  // only choice 0 computes the prompt
  ASSERT_EQ(plan.forks.size(), 2u);
  const std::vector<BlockId>& parent = plan.sequences[0].block_table;
  ASSERT_EQ(parent.size(), 3u);
  for (const Fork& fork : plan.forks) {
    ASSERT_EQ(fork.block_table.size(), 3u);
    EXPECT_EQ(fork.block_table[0], parent[0]);
    EXPECT_EQ(fork.block_table[1], parent[1]);
    EXPECT_NE(fork.block_table[2], parent[2]);
    ASSERT_EQ(fork.copies.size(), 1u);
    EXPECT_EQ(fork.copies[0].from, parent[2]);
    EXPECT_EQ(fork.copies[0].to, fork.block_table[2]);
  }
  EXPECT_EQ(scheduler.pool().ref_count(parent[0]), 3);
  EXPECT_EQ(scheduler.pool().ref_count(parent[2]), 1);
  const std::vector<StepResult> results = executor.launch(plan);
  EXPECT_EQ(results.size(), 3u);  // each choice samples from the prompt's logits
  scheduler.on_step_finished(plan.step, results);
  const std::vector<FinishedSequence> finished = run_to_completion(scheduler, executor);
  ASSERT_EQ(finished.size(), 3u);
  std::set<std::vector<int32_t>> replies;
  for (const FinishedSequence& done : finished) replies.insert(done.generated);
  EXPECT_EQ(replies.size(), 3u) << "the choices should diverge";
  expect_nothing_held(scheduler);
}

TEST(Scheduler, CancellationInEveryStateFreesEverything) {
  SchedulerConfig config = small_config(24, 10, 8);
  Scheduler scheduler(config);
  CheckingExecutor executor(scheduler);
  const RequestId decoding = scheduler.add_request(request(tokens(2, 40), 30));
  const RequestId mid_prefill = scheduler.add_request(request(tokens(20, 0), 4));
  const RequestId forking = scheduler.add_request(request(tokens(3, 60), 4, 0, 2));
  const RequestId waiting = scheduler.add_request(request(tokens(5, 80), 4, 9));
  StepPlan plan = scheduler.schedule();
  scheduler.on_step_finished(plan.step, executor.launch(plan));
  plan = scheduler.schedule();
  scheduler.on_step_finished(plan.step, executor.launch(plan));
  ASSERT_EQ(scheduler.sequence({mid_prefill, 0})->status, SequenceStatus::running);
  ASSERT_LT(scheduler.sequence({mid_prefill, 0})->computed_tokens, 20);
  ASSERT_GT(scheduler.sequence({decoding, 0})->tokens.size(), 2u);
  ASSERT_EQ(scheduler.sequence({waiting, 0})->status, SequenceStatus::waiting);
  ASSERT_EQ(scheduler.sequence({forking, 1})->status, SequenceStatus::waiting_for_fork);

  EXPECT_EQ(scheduler.cancel(waiting).size(), 1u);
  EXPECT_EQ(scheduler.cancel(forking).size(), 2u);  // the waiting parent and its unforked child
  EXPECT_EQ(scheduler.cancel(mid_prefill).size(), 1u);
  scheduler.check_consistency();
  // In flight: planned, then cancelled before the step finishes; its result is ignored.
  plan = scheduler.schedule();
  std::vector<StepResult> results = executor.launch(plan);
  EXPECT_EQ(scheduler.cancel(decoding).size(), 1u);
  EXPECT_TRUE(scheduler.on_step_finished(plan.step, results).finished.empty());
  EXPECT_TRUE(scheduler.cancel(decoding).empty());
  EXPECT_FALSE(scheduler.sequence({decoding, 0}));
  expect_nothing_held(scheduler);
}

TEST(Scheduler, CancellingAPreemptedRequestFreesEverything) {
  SchedulerConfig config = small_config(14, 32);
  Scheduler scheduler(config);
  CheckingExecutor executor(scheduler);
  for (int i = 0; i < 3; ++i) scheduler.add_request(request(tokens(8, 100 * i), 12));
  for (int step = 0; step < 100; ++step) {
    const StepPlan plan = scheduler.schedule();
    scheduler.on_step_finished(plan.step, executor.launch(plan));
    if (scheduler.counters().preemptions > 0) break;
  }
  ASSERT_GT(scheduler.counters().preemptions, 0);
  ASSERT_EQ(scheduler.sequence({2, 0})->status, SequenceStatus::preempted);
  for (RequestId id = 0; id < 3; ++id) scheduler.cancel(id);
  expect_nothing_held(scheduler);
}

TEST(Scheduler, StepsMustFinishInOrderWithAResultPerSampler) {
  Scheduler scheduler(small_config(64));
  CheckingExecutor executor(scheduler);
  scheduler.add_request(request(tokens(3, 0), 5));
  const StepPlan first = scheduler.schedule();
  const std::vector<StepResult> results = executor.launch(first);
  const StepPlan second = scheduler.schedule();  // async: planned while `first` computes
  ASSERT_EQ(second.sequences.size(), 1u);
  EXPECT_EQ(second.sequences[0].tokens, std::vector<int32_t>{kPendingToken});
  EXPECT_THROW(scheduler.on_step_finished(second.step, {}), Error);
  EXPECT_THROW(scheduler.on_step_finished(first.step, {}), Error);  // the sampled token is missing
  StepResult stranger = results[0];
  stranger.id.request = 99;
  EXPECT_THROW(scheduler.on_step_finished(first.step, std::vector<StepResult>{results[0], stranger}), Error);
  EXPECT_NO_THROW(scheduler.on_step_finished(first.step, results));
  scheduler.check_consistency();
}

// Random arrivals, cancellations and stops under a budget that forces eviction and preemption.
// After every step the pool, the prefix cache and the store must agree with the sequences; at the
// end nothing may be held.
void random_run(bool asynchronous, uint32_t seed) {
  std::mt19937 rng(seed);
  SchedulerConfig config = small_config(40, 12, 6);
  Scheduler scheduler(config);
  CheckingExecutor executor(scheduler, 3);
  const std::vector<int32_t> system = tokens(9, 1000);
  std::vector<RequestId> live;
  int64_t finished = 0;
  int64_t cancelled = 0;
  std::optional<StepPlan> in_flight;
  std::vector<StepResult> in_flight_results;
  for (int step = 0; step < 2000; ++step) {
    if (step < 1800 && rng() % 3 != 0) {
      std::vector<int32_t> prompt;
      if (rng() % 2 == 0) prompt = system;  // shared prefix
      const int64_t extra = 1 + static_cast<int64_t>(rng() % 10);
      for (int64_t i = 0; i < extra; ++i) prompt.push_back(static_cast<int32_t>(rng() % 3));
      const int64_t max_tokens = 1 + static_cast<int64_t>(rng() % 20);
      const int32_t n = rng() % 6 == 0 ? 2 : 1;
      live.push_back(scheduler.add_request(request(prompt, max_tokens, static_cast<int32_t>(rng() % 3), n)));
    }
    if (!live.empty() && rng() % 8 == 0) {
      const std::size_t pick = rng() % live.size();
      cancelled += static_cast<int64_t>(scheduler.cancel(live[pick]).size());
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    }
    StepPlan plan = scheduler.schedule();
    ASSERT_LE(plan.tokens(), config.max_batch_tokens);
    if (asynchronous) {
      // Step N finishes only now, after N+1 was planned; then N+1 is launched.
      if (in_flight) {
        executor.decide_stops(in_flight_results, rng, 8);
        finished += static_cast<int64_t>(scheduler.on_step_finished(in_flight->step, in_flight_results).finished.size());
      }
      in_flight_results = executor.launch(plan);
      in_flight = std::move(plan);
    } else {
      std::vector<StepResult> results = executor.launch(plan);
      executor.decide_stops(results, rng, 8);
      finished += static_cast<int64_t>(scheduler.on_step_finished(plan.step, results).finished.size());
    }
    scheduler.check_consistency();
    const SchedulerCounters counters = scheduler.counters();
    ASSERT_EQ(counters.free_blocks + counters.in_use_blocks + counters.evictable_blocks, counters.total_blocks);
    ASSERT_LE(counters.running, config.max_running_sequences);
    if (::testing::Test::HasFailure()) return;
  }
  if (in_flight) {
    executor.decide_stops(in_flight_results, rng, 8);
    finished += static_cast<int64_t>(scheduler.on_step_finished(in_flight->step, in_flight_results).finished.size());
  }
  run_to_completion(scheduler, executor, 2000);
  const SchedulerCounters counters = scheduler.counters();
  EXPECT_GT(counters.preemptions, 0);
  EXPECT_GT(counters.prefix_hit_tokens, 0);
  EXPECT_GT(executor.restores, 0);
  EXPECT_GT(finished, 50);
  EXPECT_GT(cancelled, 5);
  EXPECT_EQ(counters.steps_in_flight, 0);
  expect_nothing_held(scheduler);
}

TEST(Scheduler, RandomRunLeaksNothing) { random_run(false, 1); }
TEST(Scheduler, RandomAsynchronousRunLeaksNothing) { random_run(true, 2); }

}  // namespace
}  // namespace deepinfer::engine

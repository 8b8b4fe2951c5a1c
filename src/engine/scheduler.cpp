#include "engine/scheduler.h"

#include <algorithm>
#include <limits>

#include "core/int_math.h"
#include "core/error.h"

namespace deepinfer::engine {
namespace {


const SchedulerConfig& validated(const SchedulerConfig& config) {
  if (config.block_tokens < 1) fail("scheduler: block_tokens = ", config.block_tokens, ", it must be at least 1");
  if (config.max_batch_tokens < 1)
    fail("scheduler: max_batch_tokens = ", config.max_batch_tokens, ", it must be at least 1");
  if (config.max_running_sequences < 1)
    fail("scheduler: max_running_sequences = ", config.max_running_sequences, ", it must be at least 1");
  if (config.state_blocks_per_sequence < 0)
    fail("scheduler: state_blocks_per_sequence = ", config.state_blocks_per_sequence, ", it must not be negative");
  if (config.snapshot_bytes < 0)
    fail("scheduler: snapshot_bytes = ", config.snapshot_bytes, ", it must not be negative");
  return config;
}

}  // namespace

SchedulerConfig scheduler_config(const model::CacheLayout& layout, int64_t cache_memory_bytes, int64_t max_batch_tokens,
                                 int32_t max_running_sequences) {
  SchedulerConfig config;
  config.cache_memory_bytes = cache_memory_bytes;
  config.block_bytes = layout.block_bytes;
  config.block_tokens = layout.block_tokens;
  config.max_batch_tokens = max_batch_tokens;
  config.max_running_sequences = max_running_sequences;
  config.state_blocks_per_sequence =
      layout.block_bytes > 0 ? ceil_div(layout.sequence_state_bytes(), layout.block_bytes) : 0;
  config.snapshot_bytes = layout.snapshot_bytes();
  return config;
}

int64_t StepPlan::tokens() const {
  int64_t total = 0;
  for (const ScheduledSequence& sequence : sequences) total += sequence.end - sequence.begin + sequence.drafts;
  return total;
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(validated(config)),
      pool_(config.cache_memory_bytes, config.block_bytes,
            config.cache_memory ? *config.cache_memory : model::host_cache_memory()),
      prefix_cache_(pool_, config.block_tokens),
      snapshots_(pool_) {}

Scheduler::Sequence& Scheduler::at(SequenceId id) {
  const auto found = sequences_.find(id);
  if (found == sequences_.end()) fail("scheduler: request ", id.request, " choice ", id.choice, " is not queued");
  return found->second;
}

RequestId Scheduler::add_request(const RequestSpec& spec) {
  if (spec.prompt.empty()) fail("request: the prompt is empty");
  for (int32_t token : spec.prompt)
    if (token < 0) fail("request: prompt token id ", token, " is negative");
  if (spec.max_tokens < 1) fail("request: max_tokens = ", spec.max_tokens, ", it must be at least 1");
  if (spec.n < 1) fail("request: n = ", spec.n, ", it must be at least 1");
  if (spec.max_chunk_tokens < 0) fail("request: max_chunk_tokens = ", spec.max_chunk_tokens, " is negative");
  if (spec.draft_tokens < 0) fail("request: draft_tokens = ", spec.draft_tokens, " is negative");
  if (static_cast<int64_t>(spec.forced.size()) >= spec.max_tokens)
    fail("request: ", spec.forced.size(), " forced tokens leave no draw within max_tokens = ", spec.max_tokens);
  for (int32_t token : spec.forced)
    if (token < 0) fail("request: forced token id ", token, " is negative");
  const auto prompt = static_cast<int64_t>(spec.prompt.size());
  if (spec.max_tokens > std::numeric_limits<int64_t>::max() / 2 - prompt)
    fail("request: max_tokens = ", spec.max_tokens, " is too large");
  // The last sampled token is never computed: a sequence holds positions 0 .. prompt + max - 2.
  const int64_t position_blocks = ceil_div(prompt + spec.max_tokens - 1, config_.block_tokens);
  const int64_t needed = config_.state_blocks_per_sequence + position_blocks;
  if (needed > pool_.total_blocks())
    fail("request of ", prompt, " prompt tokens and max_tokens = ", spec.max_tokens, " needs ", needed,
         " cache blocks alone (", position_blocks, " for its positions, ", config_.state_blocks_per_sequence,
         " for its fixed state) but the cache memory of ", config_.cache_memory_bytes, " bytes holds ",
         pool_.total_blocks(), " blocks of ", config_.block_bytes, " bytes: shorten it or raise --cache-memory");

  const RequestId request = next_request_++;
  const uint64_t arrival = next_arrival_++;
  for (int32_t choice = 0; choice < spec.n; ++choice) {
    Sequence sequence;
    sequence.id = {request, choice};
    sequence.priority = spec.priority;
    sequence.arrival = arrival;
    sequence.tokens = spec.prompt;
    sequence.tokens.insert(sequence.tokens.end(), spec.forced.begin(), spec.forced.end());
    sequence.prompt_tokens = prompt;
    sequence.max_tokens = spec.max_tokens;
    sequence.prefix_match = spec.prefix_match;
    sequence.max_chunk_tokens = spec.max_chunk_tokens;
    sequence.draft_tokens = spec.draft_tokens;
    if (choice == 0) {
      sequence.status = SequenceStatus::waiting;
      waiting_.insert(sequence.key());
    } else {
      sequence.status = SequenceStatus::waiting_for_fork;
      sequences_.at({request, 0}).fork_children.push_back(choice);
    }
    sequences_.emplace(sequence.id, std::move(sequence));
  }
  return request;
}

void Scheduler::free_snapshot(SnapshotHandle& handle) {
  if (handle == kNoSnapshot) return;
  snapshots_.free(handle);
  handle = kNoSnapshot;
}

bool Scheduler::evict_one() {
  const std::vector<EvictedBlock> gone = prefix_cache_.evict(1);
  for (EvictedBlock evicted : gone) free_snapshot(evicted.snapshot);
  return !gone.empty();
}

bool Scheduler::drop_one_snapshot() {
  for (auto key = running_.rbegin(); key != running_.rend(); ++key) {
    Sequence& sequence = at(*key);
    if (sequence.snapshot != kNoSnapshot) {
      free_snapshot(sequence.snapshot);
      return true;
    }
    if (sequence.pending_snapshot != kNoSnapshot) {  // write() of a dropped handle is a no-op
      free_snapshot(sequence.pending_snapshot);
      return true;
    }
  }
  return false;
}

std::optional<BlockId> Scheduler::allocate(const Sequence& requester, AllocationMode mode) {
  for (;;) {
    if (const std::optional<BlockId> block = pool_.allocate()) return block;
    if (evict_one()) continue;
    if (mode == AllocationMode::spare) return std::nullopt;
    if (drop_one_snapshot()) continue;
    if (running_.empty()) return std::nullopt;
    const OrderKey victim = *running_.rbegin();
    if (mode == AllocationMode::admission && !(requester.key() < victim)) return std::nullopt;
    const bool itself = victim == requester.key();
    preempt(at(victim));
    if (itself) return std::nullopt;
  }
}

void Scheduler::try_snapshot(Sequence& sequence, int64_t boundary) {
  if (sequence.pending_snapshot != kNoSnapshot) return;  // one in flight at a time
  std::optional<SnapshotHandle> handle = snapshots_.reserve(config_.snapshot_bytes);
  while (!handle && evict_one()) handle = snapshots_.reserve(config_.snapshot_bytes);
  if (!handle) return;  // a snapshot only serves later requests: never preempt for one
  sequence.pending_snapshot = *handle;
  sequence.pending_snapshot_boundary = boundary;
  sequence.pending_snapshot_step = next_step_ - 1;
}

bool Scheduler::schedule_chunk(Sequence& sequence, AllocationMode mode) {
  const int64_t block = config_.block_tokens;
  const int64_t begin = sequence.scheduled;
  const int64_t total = sequence.total();
  int64_t chunk = std::min(total - begin, budget_);
  if (sequence.max_chunk_tokens > 0) chunk = std::min(chunk, sequence.max_chunk_tokens);
  int64_t end = begin + chunk;
  if (end < total && end / block * block > begin) end = end / block * block;  // a boundary: snapshot-able
  // Stop at the prompt's last full block too, so that a snapshot there makes the prompt's
  // prefix reusable by requests that share it (a system prompt, n > 1 retries, edits).
  const int64_t prompt_boundary = prompt_snapshot_boundary(sequence);
  if (config_.prefix_caching && begin < prompt_boundary && prompt_boundary < end) end = prompt_boundary;
  if (begin < sequence.share_boundary && sequence.share_boundary < end) end = sequence.share_boundary;
  const int64_t needed = ceil_div(end, block);
  while (static_cast<int64_t>(sequence.blocks.size()) < needed) {
    const std::optional<BlockId> allocated = allocate(sequence, mode);
    if (!allocated) return false;  // running mode: `sequence` preempted itself
    sequence.blocks.push_back(*allocated);
  }
  const bool samples = end == total;
  budget_ -= end - begin;
  const auto draft_room = static_cast<int32_t>(samples ? std::min<int64_t>(sequence.draft_tokens, budget_) : 0);
  budget_ -= draft_room;
  entries_.push_back({sequence.id, begin, end, samples, draft_room});
  sequence.scheduled = end;
  if (samples) ++sequence.pending_samples;
  // Before a share boundary a snapshot would only occupy the one in-flight slot that boundary's
  // snapshot needs (the next chunk is planned while this one computes).
  if (config_.prefix_caching && end % block == 0 && end >= sequence.share_boundary) try_snapshot(sequence, end);
  return true;
}

bool Scheduler::admit(Sequence& sequence) {
  PrefixMatch match;
  if (config_.prefix_caching && sequence.prefix_match) {
    match = prefix_cache_.match(sequence.tokens);
    prefix_cache_.pin(match);  // before anything below can evict
  }
  sequence.blocks = match.blocks;
  sequence.computed = sequence.scheduled = match.tokens;
  sequence.share_boundary =
      match.shared_tokens > match.tokens && match.shared_tokens < prompt_snapshot_boundary(sequence)
          ? match.shared_tokens
          : 0;
  bool admitted = true;
  for (int64_t i = 0; admitted && i < config_.state_blocks_per_sequence; ++i) {
    const std::optional<BlockId> block = allocate(sequence, AllocationMode::admission);
    if (block) sequence.state_blocks.push_back(*block);
    admitted = block.has_value();
  }
  admitted = admitted && schedule_chunk(sequence, AllocationMode::admission);
  if (!admitted) {
    release_all(sequence);
    sequence.computed = sequence.scheduled = 0;
    return false;
  }
  waiting_.erase(sequence.key());
  running_.insert(sequence.key());
  sequence.status = SequenceStatus::running;
  sequence.starts = true;
  sequence.restore = match.snapshot;
  queried_tokens_ += static_cast<int64_t>(sequence.tokens.size());
  hit_tokens_ += match.tokens;
  return true;
}

void Scheduler::fork_children(Sequence& parent, StepPlan& plan, PlannedStep& planned) {
  const int64_t block = config_.block_tokens;
  // Where the children part: the prompt and the forced tokens every choice starts with.
  const auto prompt = static_cast<int64_t>(parent.tokens.size());
  const auto full = static_cast<std::size_t>(prompt / block);
  for (int32_t choice : parent.fork_children) {
    Sequence& child = at(SequenceId{parent.id.request, choice});
    std::vector<BlockId> own;  // state blocks, then the copy of the partial block
    bool ok = static_cast<int64_t>(running_.size()) < config_.max_running_sequences;
    const int64_t own_count = config_.state_blocks_per_sequence + (prompt % block != 0 ? 1 : 0);
    for (int64_t i = 0; ok && i < own_count; ++i) {
      // Spare only: preempting here could hit a child forked a moment ago.
      const std::optional<BlockId> allocated = allocate(child, AllocationMode::spare);
      if (allocated) own.push_back(*allocated);
      ok = allocated.has_value();
    }
    if (!ok) {  // runs on its own later, recomputing the prompt like a preempted sequence
      for (BlockId held : own) pool_.release(held);
      child.status = SequenceStatus::waiting;
      waiting_.insert(child.key());
      continue;
    }
    Fork fork;
    fork.parent = parent.id;
    fork.child = child.id;
    fork.child_epoch = child.epoch;
    child.blocks.assign(parent.blocks.begin(), parent.blocks.begin() + static_cast<std::ptrdiff_t>(full));
    for (BlockId shared : child.blocks) pool_.retain(shared);
    const auto state_count = static_cast<std::ptrdiff_t>(config_.state_blocks_per_sequence);
    child.state_blocks.assign(own.begin(), own.begin() + state_count);
    if (prompt % block != 0) {
      child.blocks.push_back(own.back());
      fork.copies.push_back({parent.blocks[full], own.back()});
    }
    child.status = SequenceStatus::running;
    child.scheduled = prompt;
    child.pending_samples = 1;
    running_.insert(child.key());
    fork.block_table = child.blocks;
    fork.state_blocks = child.state_blocks;
    plan.forks.push_back(std::move(fork));
    planned.work.push_back({child.id, child.epoch, prompt, true, kNoSnapshot, prompt, 0});
  }
  parent.fork_children.clear();
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  plan.step = next_step_++;
  forced_since_plan_.clear();  // this plan sees them as known tokens
  entries_.clear();
  budget_ = config_.max_batch_tokens;
  preempted_this_step_ = false;
  const auto has_entry = [&](SequenceId id) {
    return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& entry) { return entry.id == id; });
  };
  const auto running_pass = [&](bool one_token) {
    const std::vector<OrderKey> order(running_.begin(), running_.end());
    for (const OrderKey& key : order) {
      if (budget_ == 0) return;
      if (running_.count(key) == 0) continue;  // preempted by a more important one
      Sequence& sequence = at(key);
      const int64_t remaining = sequence.total() - sequence.scheduled;
      if (remaining <= 0 || (remaining == 1) != one_token || has_entry(sequence.id)) continue;
      if (sequence.generated() + sequence.pending_samples >= sequence.max_tokens) continue;  // last token due
      schedule_chunk(sequence, AllocationMode::running);
    }
  };
  running_pass(true);
  running_pass(false);
  if (!preempted_this_step_) {
    const std::vector<OrderKey> order(waiting_.begin(), waiting_.end());
    for (const OrderKey& key : order) {
      if (budget_ == 0 || static_cast<int64_t>(running_.size()) >= config_.max_running_sequences) break;
      if (!admit(at(key))) break;  // FCFS within a priority: nobody overtakes the head
    }
  }

  PlannedStep planned;
  planned.step = plan.step;
  for (const Entry& entry : entries_) {
    Sequence& sequence = at(entry.id);
    ScheduledSequence item;
    item.id = entry.id;
    item.epoch = sequence.epoch;
    item.begin = entry.begin;
    item.end = entry.end;
    const auto known = static_cast<int64_t>(sequence.tokens.size());
    for (int64_t position = entry.begin; position < entry.end; ++position)
      item.tokens.push_back(position < known ? sequence.tokens[static_cast<std::size_t>(position)] : kPendingToken);
    item.needs_logits = entry.samples;
    item.draft_room = entry.draft_room;
    item.block_table = sequence.blocks;
    if (sequence.starts) {
      item.starts = true;
      item.restore = sequence.restore;
      item.state_blocks = sequence.state_blocks;
      sequence.starts = false;
    }
    if (sequence.pending_snapshot != kNoSnapshot && sequence.pending_snapshot_step == plan.step)
      item.save_snapshot = sequence.pending_snapshot;
    planned.work.push_back({entry.id, sequence.epoch, entry.end, entry.samples, item.save_snapshot, entry.begin, 0});
    plan.sequences.push_back(std::move(item));
  }
  for (const Entry& entry : entries_) {
    Sequence& sequence = at(entry.id);
    if (entry.samples && !sequence.fork_children.empty()) fork_children(sequence, plan, planned);
  }
  entries_.clear();
  plan.dropped = std::move(dropped_);
  dropped_.clear();
  if (!planned.work.empty()) in_flight_.push_back(std::move(planned));
  return plan;
}

int64_t Scheduler::prompt_snapshot_boundary(const Sequence& sequence) const {
  return sequence.prompt_tokens / config_.block_tokens * config_.block_tokens;
}

void Scheduler::cache_prefix(Sequence& sequence) {
  if (sequence.snapshot == kNoSnapshot) return;
  const int64_t boundary = sequence.snapshot_boundary;
  const InsertResult inserted =
      prefix_cache_.insert(std::span<const int32_t>(sequence.tokens).first(static_cast<std::size_t>(boundary)),
                           std::span<const BlockId>(sequence.blocks)
                               .first(static_cast<std::size_t>(boundary / config_.block_tokens)),
                           sequence.snapshot);
  if (inserted.snapshot_adopted) sequence.snapshot = kNoSnapshot;
  free_snapshot(sequence.snapshot);
}

void Scheduler::release_all(Sequence& sequence) {
  for (BlockId block : sequence.blocks) pool_.release(block);
  for (BlockId block : sequence.state_blocks) pool_.release(block);
  sequence.blocks.clear();
  sequence.state_blocks.clear();
  free_snapshot(sequence.snapshot);
  free_snapshot(sequence.pending_snapshot);
}

void Scheduler::preempt(Sequence& sequence) {
  cache_prefix(sequence);  // its prefix up to its last snapshot makes the recompute cheap
  release_all(sequence);
  const auto entry = std::find_if(entries_.begin(), entries_.end(),
                                  [&](const Entry& planned) { return planned.id == sequence.id; });
  if (entry != entries_.end()) {
    budget_ += entry->end - entry->begin + entry->draft_room;
    entries_.erase(entry);
  }
  sequence.computed = sequence.scheduled = 0;
  sequence.pending_samples = 0;  // samples of steps in flight are discarded with the epoch
  ++sequence.epoch;
  sequence.starts = false;
  sequence.restore = kNoSnapshot;
  running_.erase(sequence.key());
  sequence.status = SequenceStatus::preempted;
  waiting_.insert(sequence.key());
  ++preemptions_;
  preempted_this_step_ = true;
  dropped_.push_back(sequence.id);
}

void Scheduler::finish(Sequence& sequence, SequenceEnd reason, StepOutcome& outcome) {
  if (config_.prefix_caching) cache_prefix(sequence);
  release_all(sequence);
  outcome.finished.push_back({sequence.id, reason,
                              std::vector<int32_t>(sequence.tokens.begin() + sequence.prompt_tokens,
                                                   sequence.tokens.end())});
  running_.erase(sequence.key());
  const SequenceId id = sequence.id;  // `sequence` dies with the erase
  sequences_.erase(id);
}

bool Scheduler::is_current(SequenceId id, uint64_t epoch) const {
  const auto found = sequences_.find(id);
  return found != sequences_.end() && found->second.status == SequenceStatus::running &&
         found->second.epoch == epoch;
}

StepOutcome Scheduler::on_step_finished(uint64_t step, std::span<const StepResult> results) {
  if (in_flight_.empty() || in_flight_.front().step != step) {
    const bool planned = std::any_of(in_flight_.begin(), in_flight_.end(),
                                     [&](const PlannedStep& in_flight) { return in_flight.step == step; });
    if (!planned && step < next_step_ && results.empty()) return {};  // an empty plan
    fail("scheduler: step ", step, " finished out of order or twice (oldest step in flight: ",
         in_flight_.empty() ? std::string("none") : std::to_string(in_flight_.front().step), ")");
  }
  const PlannedStep& planned = in_flight_.front();
  // Validate everything before changing anything.
  std::map<SequenceId, uint64_t> samplers;  // sequence -> epoch it sampled in
  for (const Work& work : planned.work)
    if (work.samples) samplers[work.id] = work.epoch;
  std::set<SequenceId> reported;
  for (const StepResult& result : results) {
    const auto sampler = samplers.find(result.id);
    if (sampler == samplers.end())
      fail("step ", step, ": a result for request ", result.id.request, " choice ", result.id.choice,
           ", which did not sample in it");
    if (!reported.insert(result.id).second)
      fail("step ", step, ": two results for request ", result.id.request, " choice ", result.id.choice);
    if (result.token < 0) fail("step ", step, ": sampled token id ", result.token, " is negative");
    for (int32_t token : result.forced)
      if (token < 0) fail("step ", step, ": forced token id ", token, " is negative");
  }
  // Where speculative steps left their sequences' states.
  std::map<SequenceId, int64_t> moved;
  for (const StepResult& result : results) {
    if (result.computed < 0) continue;
    const auto work = std::find_if(planned.work.begin(), planned.work.end(),
                                   [&](const Work& w) { return w.id == result.id && w.samples; });
    if (work == planned.work.end() || work->drafts == 0 || result.computed < work->begin || result.computed > work->end + work->drafts)
      fail("step ", step, ": request ", result.id.request, " choice ", result.id.choice, " reports its state at ",
           result.computed, ", outside what its work [", work->begin, ", ", work->end, ") with ", work->drafts,
           " drafts could leave");
    moved[result.id] = result.computed;
  }
  for (const auto& [id, epoch] : samplers)
    if (is_current(id, epoch) && reported.count(id) == 0)
      fail("step ", step, ": no sampled token for request ", id.request, " choice ", id.choice);

  const PlannedStep done = std::move(in_flight_.front());
  in_flight_.pop_front();
  for (const Work& work : done.work) {
    if (!is_current(work.id, work.epoch)) continue;  // finished, cancelled or preempted meanwhile
    Sequence& sequence = at(work.id);
    if (const auto found = moved.find(work.id); found != moved.end() && work.samples) {
      // Positions planned after this work (the next plan's) shift with it; take_forced_tokens
      // rebuilds that plan's item.
      sequence.scheduled += found->second - work.end;
      sequence.computed = found->second;
      continue;
    }
    sequence.computed = std::max(sequence.computed, work.end);
    if (work.snapshot != kNoSnapshot && sequence.pending_snapshot == work.snapshot) {
      free_snapshot(sequence.snapshot);  // only the latest boundary is kept
      sequence.snapshot = work.snapshot;
      sequence.snapshot_boundary = sequence.pending_snapshot_boundary;
      sequence.pending_snapshot = kNoSnapshot;
      // The prompt's own prefix, and the part it shares with earlier prompts, go into the cache
      // at once: requests sharing them need not wait for this one to finish.
      if (sequence.snapshot_boundary == prompt_snapshot_boundary(sequence) ||
          sequence.snapshot_boundary == sequence.share_boundary)
        cache_prefix(sequence);
    }
  }
  StepOutcome outcome;
  for (const StepResult& result : results) {
    if (!is_current(result.id, samplers.at(result.id))) continue;
    Sequence& sequence = at(result.id);
    sequence.tokens.push_back(result.token);
    --sequence.pending_samples;
    for (int32_t token : result.forced) {
      if (sequence.generated() >= sequence.max_tokens) break;
      sequence.tokens.push_back(token);
    }
    if ((!result.forced.empty() || moved.contains(result.id)) && sequence.generated() < sequence.max_tokens)
      forced_since_plan_.insert(result.id);
    if (result.stop) {
      finish(sequence, SequenceEnd::stop, outcome);
    } else if (sequence.generated() >= sequence.max_tokens) {
      finish(sequence, SequenceEnd::length, outcome);
    }
  }
  return outcome;
}

int64_t Scheduler::grow_spare(Sequence& sequence, int64_t positions) {
  const int64_t block = config_.block_tokens;
  // Spare blocks only: taking them from other sequences (preemption) for a plan already built
  // would reach into its other items.
  while (static_cast<int64_t>(sequence.blocks.size()) < ceil_div(positions, block)) {
    const std::optional<BlockId> allocated = allocate(sequence, AllocationMode::spare);
    if (!allocated) return std::min(positions, static_cast<int64_t>(sequence.blocks.size()) * block);
    sequence.blocks.push_back(*allocated);
  }
  return positions;
}

bool Scheduler::retake_item(ScheduledSequence& item, Work& work, int64_t& budget) {
  Sequence& sequence = at(item.id);
  // The plan was built when the sampled token was pending: its item is that one token's decode.
  if (item.end != item.begin + 1 || item.tokens.size() != 1 || item.tokens.back() != kPendingToken || item.drafts != 0)
    fail("scheduler: request ", item.id.request, " choice ", item.id.choice,
         " took forced tokens but its planned work is not the decode of its sampled token");
  const auto known = static_cast<int64_t>(sequence.tokens.size());
  // Where the state is: the item's begin after jump-forward, elsewhere after a speculative step.
  const int64_t begin = sequence.computed;
  budget += item.end - item.begin;
  int64_t end = std::min(known, begin + std::max<int64_t>(1, budget));
  if (sequence.max_chunk_tokens > 0) end = std::min(end, begin + sequence.max_chunk_tokens);
  end = grow_spare(sequence, end);
  if (end <= begin) {  // not even a block for its first position: the next plans compute it
    sequence.scheduled = begin;
    --sequence.pending_samples;
    if (item.save_snapshot != kNoSnapshot) free_snapshot(sequence.pending_snapshot);
    budget += item.draft_room;
    return false;
  }
  if ((begin != item.begin || end != item.end) && item.save_snapshot != kNoSnapshot) {
    free_snapshot(sequence.pending_snapshot);  // it was for the old end
    item.save_snapshot = kNoSnapshot;
    work.snapshot = kNoSnapshot;
  }
  item.tokens.assign(sequence.tokens.begin() + begin, sequence.tokens.begin() + end);
  budget -= end - begin;
  item.begin = work.begin = begin;
  item.end = work.end = end;
  item.block_table = sequence.blocks;
  sequence.scheduled = end;
  if (end < known) {  // the next token is known: no draw now; the rest is a chunk of a later plan
    item.needs_logits = false;
    work.samples = false;
    --sequence.pending_samples;
    budget += item.draft_room;
    item.draft_room = 0;
  }
  return true;
}

int64_t Scheduler::free_budget(const StepPlan& plan) const {
  int64_t used = plan.tokens();
  for (const ScheduledSequence& item : plan.sequences) used += std::max(0, item.draft_room - item.drafts);
  return config_.max_batch_tokens - used;
}

void Scheduler::take_forced_tokens(StepPlan& plan) {
  if (forced_since_plan_.empty()) return;
  if (plan.step + 1 != next_step_) fail("scheduler: forced tokens for plan ", plan.step, ", not the latest");
  const auto planned = std::find_if(in_flight_.begin(), in_flight_.end(),
                                    [&](const PlannedStep& in_flight) { return in_flight.step == plan.step; });
  int64_t budget = free_budget(plan);
  for (auto item = plan.sequences.begin(); item != plan.sequences.end();) {
    if (forced_since_plan_.count(item->id) == 0 || !is_current(item->id, item->epoch)) {
      ++item;
      continue;
    }
    if (planned == in_flight_.end()) fail("scheduler: no planned work for plan ", plan.step);
    const auto work = std::find_if(planned->work.begin(), planned->work.end(),
                                   [&](const Work& w) { return w.id == item->id && w.epoch == item->epoch; });
    if (work == planned->work.end()) fail("scheduler: no planned work for a plan item");
    if (retake_item(*item, *work, budget)) {
      ++item;
      continue;
    }
    planned->work.erase(work);
    item = plan.sequences.erase(item);
  }
  forced_since_plan_.clear();
  // A plan left with nothing to do is not launched: nothing will report it finished.
  if (planned != in_flight_.end() && planned->work.empty() && plan.forks.empty()) in_flight_.erase(planned);
}

void Scheduler::take_drafts(StepPlan& plan, std::span<const DraftOffer> offers) {
  if (offers.empty()) return;
  if (plan.step + 1 != next_step_) fail("scheduler: drafts for plan ", plan.step, ", not the latest");
  const auto planned = std::find_if(in_flight_.begin(), in_flight_.end(),
                                    [&](const PlannedStep& in_flight) { return in_flight.step == plan.step; });
  if (planned == in_flight_.end()) return;
  for (const DraftOffer& offer : offers) {
    const auto item = std::find_if(plan.sequences.begin(), plan.sequences.end(),
                                   [&](const ScheduledSequence& s) { return s.id == offer.id; });
    if (item == plan.sequences.end() || offer.drafts <= 0 || !item->needs_logits || item->drafts != 0 ||
        !is_current(item->id, item->epoch))
      continue;
    Sequence& sequence = at(item->id);
    if (item->end != static_cast<int64_t>(sequence.tokens.size())) continue;  // samples after a pending token
    // Forks copy the parent's state after the pass: it must end at the prompt.
    if (std::any_of(plan.forks.begin(), plan.forks.end(), [&](const Fork& fork) { return fork.parent == item->id; }))
      continue;
    const auto work = std::find_if(planned->work.begin(), planned->work.end(),
                                   [&](const Work& w) { return w.id == item->id && w.epoch == item->epoch; });
    if (work == planned->work.end()) continue;
    // The kept drafts and the bonus token come out of what max_tokens leaves.
    int64_t drafts = std::min<int64_t>({offer.drafts, item->draft_room, sequence.max_tokens - sequence.generated() - 1});
    drafts = grow_spare(sequence, item->end + std::max<int64_t>(0, drafts)) - item->end;
    if (drafts <= 0) continue;
    if (item->save_snapshot != kNoSnapshot) {
      free_snapshot(sequence.pending_snapshot);
      item->save_snapshot = kNoSnapshot;
      work->snapshot = kNoSnapshot;
    }
    item->drafts = work->drafts = static_cast<int32_t>(drafts);
    item->block_table = sequence.blocks;
  }
}

std::vector<SequenceId> Scheduler::cancel(RequestId request) {
  std::vector<SequenceId> cancelled;
  auto found = sequences_.lower_bound(SequenceId{request, 0});
  while (found != sequences_.end() && found->first.request == request) {
    Sequence& sequence = found->second;
    release_all(sequence);
    running_.erase(sequence.key());
    waiting_.erase(sequence.key());
    cancelled.push_back(sequence.id);
    dropped_.push_back(sequence.id);
    found = sequences_.erase(found);
  }
  return cancelled;
}

std::optional<SequenceView> Scheduler::sequence(SequenceId id) const {
  const auto found = sequences_.find(id);
  if (found == sequences_.end()) return std::nullopt;
  const Sequence& sequence = found->second;
  SequenceView view;
  view.status = sequence.status;
  view.epoch = sequence.epoch;
  view.priority = sequence.priority;
  view.tokens = sequence.tokens;
  view.prompt_tokens = sequence.prompt_tokens;
  view.computed_tokens = sequence.computed;
  view.block_table = sequence.blocks;
  view.state_blocks = sequence.state_blocks;
  return view;
}

SchedulerCounters Scheduler::counters() const {
  SchedulerCounters counters;
  counters.running = static_cast<int64_t>(running_.size());
  counters.waiting = static_cast<int64_t>(sequences_.size() - running_.size());
  counters.preemptions = preemptions_;
  counters.prefix_queried_tokens = queried_tokens_;
  counters.prefix_hit_tokens = hit_tokens_;
  counters.total_blocks = pool_.total_blocks();
  counters.free_blocks = pool_.free_blocks();
  counters.in_use_blocks = pool_.in_use_blocks();
  counters.evictable_blocks = pool_.evictable_blocks();
  counters.cached_blocks = prefix_cache_.cached_blocks();
  counters.snapshots = snapshots_.snapshots();
  counters.snapshot_blocks = snapshots_.blocks();
  counters.steps_in_flight = static_cast<int64_t>(in_flight_.size());
  for (const auto& [id, sequence] : sequences_) {
    if (sequence.status != SequenceStatus::running) continue;
    counters.running_tokens += sequence.computed;
    counters.running_state_blocks += static_cast<int64_t>(sequence.state_blocks.size());
  }
  return counters;
}

void Scheduler::clear_prefix_cache() {
  for (EvictedBlock evicted : prefix_cache_.evict(std::numeric_limits<int64_t>::max()))
    free_snapshot(evicted.snapshot);
}

void Scheduler::check_consistency() const {
  const auto total = static_cast<std::size_t>(pool_.total_blocks());
  std::vector<int64_t> references(total, 0);
  std::vector<char> cached(total, 0);
  std::set<SnapshotHandle> owned;  // every snapshot someone is responsible for
  const auto own = [&](SnapshotHandle handle, const char* owner) {
    if (handle == kNoSnapshot) return;
    if (!owned.insert(handle).second) fail("consistency: snapshot ", handle, " has two owners (", owner, ")");
  };
  for (const auto& [id, sequence] : sequences_) {
    const bool running = sequence.status == SequenceStatus::running;
    if (running != (running_.count(sequence.key()) != 0))
      fail("consistency: request ", id.request, " choice ", id.choice, " running set disagrees with its status");
    const bool queued = sequence.status == SequenceStatus::waiting || sequence.status == SequenceStatus::preempted;
    if (queued != (waiting_.count(sequence.key()) != 0))
      fail("consistency: request ", id.request, " choice ", id.choice, " waiting set disagrees with its status");
    if (!running && (!sequence.blocks.empty() || !sequence.state_blocks.empty() ||
                     sequence.snapshot != kNoSnapshot || sequence.pending_snapshot != kNoSnapshot))
      fail("consistency: request ", id.request, " choice ", id.choice, " holds cache memory while not running");
    if (running && static_cast<int64_t>(sequence.blocks.size()) < ceil_div(sequence.scheduled, config_.block_tokens))
      fail("consistency: request ", id.request, " choice ", id.choice, " has fewer blocks than positions");
    for (BlockId block : sequence.blocks) ++references[static_cast<std::size_t>(block)];
    for (BlockId block : sequence.state_blocks) ++references[static_cast<std::size_t>(block)];
    own(sequence.snapshot, "a sequence");
    own(sequence.pending_snapshot, "a sequence's pending");
  }
  if (running_.size() + waiting_.size() > sequences_.size()) fail("consistency: queues name unknown sequences");
  for (const EvictedBlock& node : prefix_cache_.contents()) {
    cached[static_cast<std::size_t>(node.block)] = 1;
    own(node.snapshot, "the prefix cache");
  }
  for (SnapshotHandle handle : snapshots_.handles()) {
    if (owned.count(handle) == 0) fail("consistency: snapshot ", handle, " is stored but nobody owns it (leaked)");
    for (BlockId block : snapshots_.blocks_of(handle)) ++references[static_cast<std::size_t>(block)];
  }
  if (static_cast<int64_t>(owned.size()) != snapshots_.snapshots())
    fail("consistency: ", owned.size(), " snapshots owned but ", snapshots_.snapshots(), " stored");
  int64_t free = 0;
  int64_t evictable = 0;
  for (std::size_t block = 0; block < total; ++block) {
    const auto id = static_cast<BlockId>(block);
    if (pool_.ref_count(id) != references[block])
      fail("consistency: block ", block, " has ", pool_.ref_count(id), " references, the scheduler accounts for ",
           references[block]);
    if (pool_.cached(id) != (cached[block] != 0))
      fail("consistency: block ", block, " cached flag disagrees with the prefix cache");
    if (references[block] == 0) ++(cached[block] ? evictable : free);
  }
  if (free != pool_.free_blocks() || evictable != pool_.evictable_blocks())
    fail("consistency: ", free, " free and ", evictable, " evictable blocks counted, the pool says ",
         pool_.free_blocks(), " and ", pool_.evictable_blocks());
}

}  // namespace deepinfer::engine

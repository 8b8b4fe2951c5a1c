#pragma once
// The engine's scheduling policy and cache manager, independent of the model: which sequences
// compute which tokens in the next step, and which cache blocks they hold. An executor turns each
// StepPlan into one Model::forward_batch call, samples, and reports back (docs/ENGINE.md,
// "Scheduler", lists what it does per plan).
//
// Policy, per step, within max_batch_tokens and max_running_sequences:
//   1. running sequences with one token to compute (decodes), most important first;
//   2. running sequences in chunked prefill (or recompute), next chunk each;
//   3. waiting sequences, most important first, admitted while memory and budget allow
//      (skipped in a step that had to preempt).
// Importance: lower priority value first, then earlier arrival (FCFS), then lower choice index.
// A block that cannot be allocated is found by evicting the prefix cache (LRU), then dropping
// running sequences' snapshots, then preempting the least important running sequence (recompute:
// it goes back to waiting with its generated tokens). A waiting sequence only preempts strictly
// less important ones.
//
// Asynchronous use: schedule() for step N+1 may be called before on_step_finished(N). It assumes
// every sequence that samples in N gets its token (the plan's token id is kPendingToken, filled by
// the executor from N's sample). Steps must finish in the order they were planned.
//
// Not thread-safe: one engine thread calls everything; the overlap is host scheduling against
// device compute.
#include <compare>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <vector>

#include "engine/block_pool.h"
#include "model/cache_layout.h"
#include "engine/prefix_cache.h"
#include "engine/snapshot_store.h"

namespace deepinfer::engine {

using RequestId = int64_t;

// One completion: choice `choice` (0 .. n-1) of request `request`.
struct SequenceId {
  RequestId request = 0;
  int32_t choice = 0;
  auto operator<=>(const SequenceId&) const = default;
};

// The id of the token the previous step samples for this sequence: unknown when planned.
inline constexpr int32_t kPendingToken = -1;

struct SchedulerConfig {
  int64_t cache_memory_bytes = 0;  // --cache-memory: the one budget (blocks, fixed state, snapshots)
  int64_t block_bytes = 0;         // CacheLayout::block_bytes
  // Where the pool's blocks live (the model's backend's memory); null: host memory.
  const model::CacheMemory* cache_memory = nullptr;
  int64_t block_tokens = 64;
  int64_t max_batch_tokens = 2048;     // tokens computed per step, all sequences together
  int32_t max_running_sequences = 256;
  int64_t state_blocks_per_sequence = 0;  // ceil(CacheLayout::sequence_state_bytes() / block_bytes)
  int64_t snapshot_bytes = 0;             // CacheLayout::snapshot_bytes()
  bool prefix_caching = true;             // off: no match, no snapshots, no insert
};

// The config for a model's cache layout (block_tokens, block_bytes, state blocks, snapshot bytes).
SchedulerConfig scheduler_config(const model::CacheLayout& layout, int64_t cache_memory_bytes, int64_t max_batch_tokens,
                                 int32_t max_running_sequences);

struct RequestSpec {
  std::vector<int32_t> prompt;  // at least one token
  int64_t max_tokens = 16;      // >= 1 generated tokens per choice
  int32_t priority = 0;         // lower = more important
  int32_t n = 1;                // choices; 2+ share the prompt's cache (fork after prefill)
  // false: admission never takes blocks from the prefix cache (a request that needs every prompt
  // position computed, e.g. for prompt log-probabilities); its blocks may still be inserted.
  bool prefix_match = true;
  // > 0: no step computes more than this many of the sequence's positions (a request whose every
  // row's logits are kept bounds that buffer so); 0: only the step budget bounds a chunk.
  int64_t max_chunk_tokens = 0;
  // Generated tokens known before the first draw (jump-forward: bytes the request's grammar
  // forces at the start): every choice starts with them, computed like the prompt, and they count
  // towards max_tokens (fewer than it).
  std::vector<int32_t> forced;
  // Speculative decoding: a step that samples for this sequence may also verify up to this many
  // draft tokens (take_drafts); the plan keeps that much of its token budget for them, so that
  // how many drafts a step verifies does not depend on what else it computes.
  int32_t draft_tokens = 0;
};

enum class SequenceStatus {
  waiting,           // never run, holds nothing
  preempted,         // ran, released everything; recomputes prompt + generated when readmitted
  waiting_for_fork,  // choice 1+ of a request whose choice 0 has not finished its prefill
  running,           // holds blocks; scheduled as budget allows
};
// Finished and cancelled sequences leave the scheduler at once: on_step_finished reports the
// finished ones, cancel() the cancelled ones.

struct BlockCopy {
  BlockId from = -1;
  BlockId to = -1;
};

// One sequence's work in a step.
struct ScheduledSequence {
  SequenceId id;
  uint64_t epoch = 0;  // changes on preemption: results for an older epoch are ignored
  int64_t begin = 0;   // compute positions [begin, end)
  int64_t end = 0;
  std::vector<int32_t> tokens;  // ids of positions [begin, end); the last may be kPendingToken
  bool needs_logits = false;    // sample a token after this step (prompt's last chunk, or decode)
  std::vector<BlockId> block_table;  // ceil(end / block_tokens) blocks: block k holds [kB, (k+1)B)
  // The sequence's first step since (re)admission: create its model state, fresh (begin == 0) or
  // restored from `restore` (the state at `begin`, a block boundary; blocks 0 .. begin/B - 1 hold
  // the cached prefix). `state_blocks` are the pool blocks reserved for its fixed state.
  bool starts = false;
  SnapshotHandle restore = kNoSnapshot;
  std::vector<BlockId> state_blocks;
  // After the forward (end is a block boundary): SnapshotStore::write(save_snapshot,
  // Model::save_snapshot(sequence)).
  SnapshotHandle save_snapshot = kNoSnapshot;
  // Speculative decoding (take_drafts): positions [end, end + drafts) hold draft tokens the
  // executor fills in and verifies; block_table covers them. Never committed by the plan: the
  // step's result says which were kept (StepResult::computed, forced). draft_room: the budget
  // the plan kept for them (RequestSpec::draft_tokens, as far as the budget allowed).
  int32_t drafts = 0;
  int32_t draft_room = 0;
};

// After the step's forward: choice `child` starts as a copy of `parent` (its fixed state copied,
// the prompt's full blocks shared, `copies` applied to the pool payloads), and samples its first
// token from the parent's logits row with its own choice index.
struct Fork {
  SequenceId parent;
  SequenceId child;
  uint64_t child_epoch = 0;
  std::vector<BlockId> block_table;
  std::vector<BlockId> state_blocks;
  std::vector<BlockCopy> copies;
};

struct StepPlan {
  uint64_t step = 0;
  std::vector<ScheduledSequence> sequences;
  std::vector<Fork> forks;
  // Sequences preempted or cancelled since the previous plan: the executor drops their model
  // state once no launched step uses it, and skips their work in plans not launched yet.
  std::vector<SequenceId> dropped;

  int64_t tokens() const;  // positions computed, drafts included
  bool empty() const { return sequences.empty(); }
};

struct StepResult {
  SequenceId id;
  int32_t token = 0;  // the sampled token
  bool stop = false;  // a stop token / EOS ended the sequence: the last of `token` and `forced`
  // Tokens that follow the sampled one, not computed by this step: jump-forward's forced tokens
  // (none a stop), or a speculative step's further kept drafts and its bonus token. Those past
  // max_tokens are dropped (the sequence ends with length).
  std::vector<int32_t> forced;
  // -1: the sequence's state is at the work's end. Otherwise where it is: a speculative step
  // (drafts > 0) that kept every draft is at end + drafts; one that rejected a draft rolled its
  // state back to the work's begin, and the kept positions are computed again by the next step.
  int64_t computed = -1;
};

// A sequence's draft tokens offered for the next plan (Scheduler::take_drafts).
struct DraftOffer {
  SequenceId id;
  int32_t drafts = 0;
};

enum class SequenceEnd { stop, length };

struct FinishedSequence {
  SequenceId id;
  SequenceEnd reason = SequenceEnd::stop;
  std::vector<int32_t> generated;
};

struct StepOutcome {
  std::vector<FinishedSequence> finished;
};

struct SchedulerCounters {
  int64_t running = 0;
  int64_t waiting = 0;  // waiting + preempted + waiting_for_fork
  int64_t preemptions = 0;
  int64_t prefix_queried_tokens = 0;  // prompt tokens (+ generated, on readmission) of admitted sequences
  int64_t prefix_hit_tokens = 0;      // of those, served from the prefix cache
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;
  int64_t in_use_blocks = 0;
  int64_t evictable_blocks = 0;
  int64_t cached_blocks = 0;  // prefix cache nodes (in use or evictable)
  int64_t snapshots = 0;
  int64_t snapshot_blocks = 0;
  int64_t steps_in_flight = 0;
  // Running sequences: tokens whose state they hold (confirmed computed positions) and the pool
  // blocks reserved for their fixed state. With in_use_blocks, the cache bytes held per token.
  int64_t running_tokens = 0;
  int64_t running_state_blocks = 0;
};

struct SequenceView {
  SequenceStatus status = SequenceStatus::waiting;
  uint64_t epoch = 0;
  int32_t priority = 0;
  std::vector<int32_t> tokens;  // prompt + generated (known ids)
  int64_t prompt_tokens = 0;
  int64_t computed_tokens = 0;  // state in the cache, confirmed by on_step_finished
  std::vector<BlockId> block_table;
  std::vector<BlockId> state_blocks;
};

class Scheduler {
 public:
  // Throws deepinfer::Error naming a field that is out of range.
  explicit Scheduler(const SchedulerConfig& config);

  // Queues a request (n sequences). Throws deepinfer::Error when it is malformed or could never
  // fit the cache budget alone (its longest sequence's blocks + fixed state exceed the pool).
  RequestId add_request(const RequestSpec& spec);

  StepPlan schedule();
  // `step` must be the oldest planned step not finished yet. Results: one per sequence that
  // sampled (needs_logits, and fork children) and is still current; others are ignored.
  StepOutcome on_step_finished(uint64_t step, std::span<const StepResult> results);
  // Jump-forward: after on_step_finished gave sequences forced tokens, the plan built before it
  // (the latest, not launched yet) still computes only their sampled token and would draw the
  // next one, which is known now. This extends those items over the forced tokens, as far as the
  // step's token budget and spare blocks allow (a chunk of a prefill: the cache stays exact), and
  // fills in the sampled token. An item that cannot take them all draws nothing; the next plans
  // compute the rest as a chunk. A snapshot planned at the item's end is dropped (it only serves
  // later requests). Nothing to do after a schedule() that already saw the tokens.
  // Speculative decoding's results go the same way: a sequence whose step kept drafts, or rolled
  // back (StepResult::computed), has its item in that plan rebuilt from where its state is to its
  // last known token, under the same budget and spare-block limits (an item that cannot get a
  // block for its first position leaves the plan; the next plans compute it).
  void take_forced_tokens(StepPlan& plan);
  // Speculative decoding: extends items of the latest plan (not launched yet) that sample after
  // their last known token by up to offer.drafts draft positions each, within the budget the plan
  // kept for them (draft_room), spare blocks, and max_tokens (the drafts kept and the bonus token
  // must fit). Sets
  // ScheduledSequence::drafts; a snapshot planned at the item's end is dropped (the step's state
  // does not stop there).
  void take_drafts(StepPlan& plan, std::span<const DraftOffer> offers);
  // The plan's token budget not computed or kept for drafts.
  int64_t free_budget(const StepPlan& plan) const;

  // Cancels every choice of the request, in any state; frees what they hold. Returns the
  // sequences cancelled (none when the request is unknown or already done).
  std::vector<SequenceId> cancel(RequestId request);

  // True while the sequence runs in the epoch a plan named: false after it finished, was
  // cancelled or preempted. An executor skips plan items that are no longer current.
  bool is_current(SequenceId id, uint64_t epoch) const;
  std::optional<SequenceView> sequence(SequenceId id) const;
  SchedulerCounters counters() const;

  // Evicts every unreferenced cached block and frees their snapshots.
  void clear_prefix_cache();
  // Recomputes every block's reference count and cached state, and the set of live snapshots,
  // from the sequences, the prefix cache and the store; throws deepinfer::Error on a mismatch.
  void check_consistency() const;

  const SchedulerConfig& config() const { return config_; }
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  SnapshotStore& snapshots() { return snapshots_; }
  const PrefixCache& prefix_cache() const { return prefix_cache_; }

 private:
  using OrderKey = std::tuple<int32_t, uint64_t, RequestId, int32_t>;  // priority, arrival, request, choice

  struct Sequence {
    SequenceId id;
    int32_t priority = 0;
    uint64_t arrival = 0;
    SequenceStatus status = SequenceStatus::waiting;
    std::vector<int32_t> tokens;
    int64_t prompt_tokens = 0;
    int64_t max_tokens = 0;
    bool prefix_match = true;
    int64_t max_chunk_tokens = 0;
    int32_t draft_tokens = 0;
    // A block boundary inside the prompt up to which earlier prompts share its blocks but where
    // the cache has no snapshot (0: none): prefill stops there and its snapshot goes into the
    // cache, so the next prompt with that prefix resumes from it.
    int64_t share_boundary = 0;
    std::vector<BlockId> blocks;        // block table; its first blocks are the pinned prefix match
    std::vector<BlockId> state_blocks;  // fixed state
    int64_t computed = 0;               // confirmed
    int64_t scheduled = 0;              // computed + planned in steps not finished yet
    int32_t pending_samples = 0;        // tokens sampled by steps not finished yet
    uint64_t epoch = 0;
    bool starts = false;
    SnapshotHandle restore = kNoSnapshot;
    SnapshotHandle snapshot = kNoSnapshot;  // own, confirmed, at `snapshot_boundary`
    int64_t snapshot_boundary = 0;
    SnapshotHandle pending_snapshot = kNoSnapshot;  // reserved for a step not finished yet
    int64_t pending_snapshot_boundary = 0;
    uint64_t pending_snapshot_step = 0;
    std::vector<int32_t> fork_children;  // choice 0 only

    int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_tokens; }
    int64_t total() const { return static_cast<int64_t>(tokens.size()) + pending_samples; }
    OrderKey key() const { return {priority, arrival, id.request, id.choice}; }
  };

  struct Work {  // what a planned step does to one sequence, applied when it finishes
    SequenceId id;
    uint64_t epoch = 0;
    int64_t end = 0;
    bool samples = false;
    SnapshotHandle snapshot = kNoSnapshot;
    int64_t begin = 0;
    int32_t drafts = 0;
  };
  struct PlannedStep {
    uint64_t step = 0;
    std::vector<Work> work;
  };
  struct Entry {  // a sequence's work in the plan being built
    SequenceId id;
    int64_t begin = 0;
    int64_t end = 0;
    bool samples = false;
    int32_t draft_room = 0;
  };
  enum class AllocationMode {
    spare,      // free list and prefix cache eviction only
    admission,  // also drop snapshots, preempt strictly less important sequences
    running,    // also drop snapshots, preempt the least important running one (maybe itself)
  };

  Sequence& at(SequenceId id);
  Sequence& at(const OrderKey& key) { return at(SequenceId{std::get<2>(key), std::get<3>(key)}); }
  std::optional<BlockId> allocate(const Sequence& requester, AllocationMode mode);
  bool evict_one();
  bool drop_one_snapshot();
  void free_snapshot(SnapshotHandle& handle);
  bool schedule_chunk(Sequence& sequence, AllocationMode mode);
  void try_snapshot(Sequence& sequence, int64_t boundary);
  bool admit(Sequence& sequence);
  // take_forced_tokens for one item; false when the item left the plan.
  bool retake_item(ScheduledSequence& item, Work& work, int64_t& budget);
  // Spare blocks until the sequence has ceil(positions / block_tokens); the positions covered.
  int64_t grow_spare(Sequence& sequence, int64_t positions);
  void fork_children(Sequence& parent, StepPlan& plan, PlannedStep& planned);
  void cache_prefix(Sequence& sequence);
  // The prompt's last full-block boundary: prefill stops there and snapshots (prefix caching).
  int64_t prompt_snapshot_boundary(const Sequence& sequence) const;
  void release_all(Sequence& sequence);
  void preempt(Sequence& sequence);
  void finish(Sequence& sequence, SequenceEnd reason, StepOutcome& outcome);

  SchedulerConfig config_;
  BlockPool pool_;
  PrefixCache prefix_cache_;
  SnapshotStore snapshots_;
  std::map<SequenceId, Sequence> sequences_;
  std::set<OrderKey> waiting_;  // waiting and preempted
  std::set<OrderKey> running_;
  std::deque<PlannedStep> in_flight_;
  std::vector<SequenceId> dropped_;
  RequestId next_request_ = 0;
  uint64_t next_arrival_ = 0;
  uint64_t next_step_ = 0;
  int64_t preemptions_ = 0;
  int64_t queried_tokens_ = 0;
  int64_t hit_tokens_ = 0;
  // Sequences that took forced tokens, or whose state moved off their planned end (speculative
  // steps), since the latest plan was built (take_forced_tokens).
  std::set<SequenceId> forced_since_plan_;
  // The plan being built by schedule().
  std::vector<Entry> entries_;
  int64_t budget_ = 0;
  bool preempted_this_step_ = false;
};

}  // namespace deepinfer::engine

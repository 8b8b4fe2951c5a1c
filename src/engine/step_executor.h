#pragma once
// Runs the scheduler's plans on the model: one Model::forward_batch per step, then the sampler.
// A step goes through these phases so that the engine thread can plan the next step while this
// one computes (docs/ENGINE.md, "Engine loop"):
//   prepare(plan)  engine thread: skips work that is no longer current, fills pending token ids,
//                  creates or restores sequence states, binds their block tables to pool
//                  payloads, loads snapshots;
//   issue()        engine thread: starts the step. A backend that chains passes
//                  (Model::chains_draws) gets the pass issued here and computes it while the
//                  engine goes on; otherwise a worker thread runs the forward pass, fork copies
//                  and sampling, touching only the prepared states and pool payloads;
//   collect()      engine thread: waits for the step's tokens;
//   finish()       engine thread: writes snapshots into the store, returns the StepResults for
//                  Scheduler::on_step_finished and the tokens produced.
// Steps run one at a time, except that a step may be prepared and issued while the one before it
// computes when it is chained on it (can_chain): every row continues a sequence of that step with
// the token that step is drawing, which the device hands over without the host (vLLM's
// asynchronous scheduling, SGLang's overlap scheduler). The device then never waits for the host.
#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/scheduler.h"
#include "engine/confidence_log.h"
#include "engine/speculation.h"
#include "engine/token_history.h"
#include "model/model.h"

namespace deepinfer::engine {

// What the sampler needs to know about a request (shared by its choices).
struct RequestSampling {
  SamplingParams params;
  uint64_t seed = 0;
  std::vector<int32_t> stop_token_ids;  // params.stop_token_ids plus EOS unless ignored
  int64_t max_tokens = 0;               // generated tokens per choice, forced ones included
  // Jump-forward (EngineOptions::jump_forward, a constraint with an encoder, no logprobs asked):
  // the bytes the grammar forces after a drawn token are appended as tokens without a draw.
  bool jump_forward = false;
  // The tokens the grammar forces before the first draw (jump_forward, a constraint from the
  // first token): every choice starts with them (RequestSpec::forced).
  std::vector<int32_t> initial_forced;
  // Speculative decoding: the drafter proposes this request's next tokens and a step verifies
  // them (the engine's mode is not off, the model has a drafter; no grammar and no penalties,
  // whose per-position state the verification does not carry).
  bool speculative = false;
  // A speculative request sampled with its own seed (SamplingParams::seed) replays exactly: each
  // verified row draws the token the sampler draws there without speculation (the same uniform),
  // and a draft is kept while it matches. Speculative sampling's tokens (accept_sampled) follow the
  // target's distribution but depend on the drafts, and the drafts on what the drafter's context
  // holds (a prefix-cache hit starts it empty), how many drafts the step's budget left room for,
  // and whether the governor drafted at all: none of which a seed can pin down.
  bool exact_replay = false;
};

// The tokens request `sampling` forces before its first draw (RequestSampling::initial_forced):
// none unless it jumps forward and its grammar applies from the first token; fewer than max_tokens.
std::vector<int32_t> initial_forced_tokens(const RequestSampling& sampling);

struct ProducedToken {
  SequenceId id;
  uint64_t epoch = 0;  // the sequence's epoch in the plan
  int32_t token = -1;
  float logprob = 0;
  std::vector<TokenLogprob> top_logprobs;
  bool forced = false;  // appended by jump-forward, not drawn (no log-probability)
  // Follows the previous token of the same sequence in this step: a speculative step's further
  // kept drafts and its bonus token.
  bool continues = false;
};

// Prompt tokens scored by one step (RequestSampling::params.prompt_logprobs): `scores[i]` is
// prompt token `first_index + i` (first_index >= 1), scored by the row of the position before it.
struct ScoredPrompt {
  SequenceId id;
  uint64_t epoch = 0;
  int64_t first_index = 0;
  std::vector<SampleResult> scores;
};

class StepExecutor {
 public:
  StepExecutor(const model::Model& model, Scheduler& scheduler);
  // Speculative decoding for requests marked RequestSampling::speculative (needs model.drafter();
  // `rates`: the step costs of scheduled mode, empty to verify every draft).
  void set_speculation(SpeculativeMode mode, StepRateTable rates);
  // Records every verification of a whole draft block (EngineOptions::confidence_log).
  void set_confidence_log(std::unique_ptr<ConfidenceLog> log) { confidence_log_ = std::move(log); }
  // The draft tokens each speculative sequence of `plan` has ready after its last known token, as
  // the mode verifies them (static: all; scheduled: the budget's share of each). After
  // Scheduler::take_forced_tokens, for Scheduler::take_drafts.
  std::vector<DraftOffer> draft_offers(const StepPlan& plan) const;
  const SpeculationCounters& speculation() const { return speculation_; }
  // Whether steps draft and verify (the speculation governor's choice; on by default). Off,
  // speculative requests step like any other (no taps, so a GPU draws their tokens on the device
  // and can chain steps); when drafting resumes, each drafter context restarts at its sequence's
  // position then, without the positions stepped meanwhile (like after a prefix-cache hit).
  void set_drafting(bool drafting) { drafting_ = drafting; }

  // A request's sampling settings; before its first plan. Forgotten by forget_request.
  void add_request(RequestId request, std::shared_ptr<const RequestSampling> sampling,
                   const std::vector<int32_t>& prompt, int32_t choices);
  void forget_request(RequestId request);
  // Drops a sequence's model state (preempted: recomputed later; history kept) or everything
  // about it (finished or cancelled).
  void drop_state(SequenceId id);
  void forget_sequence(SequenceId id);

  // A step after every issued one; when one is still in flight, `plan` must be chained on it.
  void prepare(const StepPlan& plan);
  // True when `plan` can be prepared and issued while the one step in flight computes: every item
  // is a prompt chunk (its ids known) or the next token of a sequence that step draws for, with
  // nothing that needs that token on the host first (a grammar's mask, repetition penalties,
  // Engram's hashes); no item scores its prompt or restores a snapshot, and neither step forks or
  // drops a sequence. (Snapshots are taken between the two: Model::begin_snapshot when the first
  // is issued.)
  bool can_chain(const StepPlan& plan) const;
  // Starts the latest prepared step. Never throws: an error is kept and thrown by collect().
  void issue();
  // Waits for the oldest issued step; throws what its compute threw.
  void collect();
  // Issued steps not finished or abandoned yet (0, 1 or 2).
  std::size_t in_flight() const { return steps_.size(); }
  struct Finished {
    uint64_t step = 0;
    std::vector<StepResult> results;
    std::vector<ProducedToken> tokens;
    // Each prompt token is reported once per request, in order, whatever preemption recomputes.
    std::vector<ScoredPrompt> scored_prompts;
    int64_t tokens_computed = 0;
    // Prompt tokens served from the prefix cache, per sequence restored in this step.
    std::vector<std::pair<SequenceId, int64_t>> restored;
  };
  Finished finish();
  // After collect() threw: drops the oldest step and names its sequences (each item's and each
  // fork's child), whose model states are now partly advanced.
  struct Abandoned {
    uint64_t step = 0;
    std::vector<SequenceId> sequences;
  };
  Abandoned abandon();

 private:
  struct SequenceContext {
    std::optional<model::SequenceState> state;
    std::optional<TokenHistory> history;
    int32_t last_token = kPendingToken;
    // Structured output: the matcher follows the generated tokens once `constrained` (after the
    // constraint's trigger token, or from the start). It moves only in finish(), with the
    // history, so a preempted sequence's recompute leaves it where the tokens are.
    std::optional<grammar::Matcher> matcher;
    bool constrained = false;
    // The grammar forced bytes after a token while a chained step already computed the next one
    // (so that one was drawn, not forced): the next step is not chained, so the rest of the run
    // is jump-forward's again.
    bool forced_waiting = false;
    // The request's initial forced tokens were reported (with the sequence's first drawn token).
    bool initial_reported = false;
    // Speculative decoding: the drafter's context of the sequence's committed positions, and the
    // block it proposed after the last token (at drafts_position ..), with the logits each draft
    // was drawn from (sampled requests) and their confidences (this block's, and the block's
    // before: scheduled mode's budget reads the older).
    std::optional<model::DraftState> draft_context;
    std::vector<int32_t> drafts;
    int64_t drafts_position = -1;
    std::vector<float> draft_logits;
    std::vector<float> confidence;
    std::vector<float> confidence_raw;  // this block's, before the temperatures (the confidence log)
    std::optional<std::vector<float>> lagged_confidence;
    // The state at rollback_length, taken before a verification: a rejected draft restores it.
    std::vector<std::byte> rollback;
    int64_t rollback_length = -1;
  };
  struct PreparedItem {
    SequenceId id;
    uint64_t epoch = 0;
    int64_t begin = 0;
    int64_t end = 0;
    std::vector<int32_t> tokens;
    bool needs_logits = false;
    // Prompt tokens [score_begin, score_end) are scored: the item computes every row's logits.
    int64_t score_begin = 0;
    int64_t score_end = 0;
    SnapshotHandle save_snapshot = kNoSnapshot;
    int32_t last_token_draw = -1;  // chained: the last token is this draw of the step before
    std::vector<float> logits;  // every row when scoring the prompt or verifying, else the last one (or none)
    // Speculative: the item's rows' taps for the drafter, and its last `drafts` tokens are drafts
    // at positions end .. end + drafts - 1.
    bool speculative = false;
    int32_t drafts = 0;
    std::vector<float> taps;
    int64_t committed_end = 0;  // positions [begin, committed_end) are kept (their taps are valid)
    // Drawn verification (Prepared::drawing): the draws of rows end - 1 .. end + drafts - 1 start here.
    std::size_t first_verify_draw = 0;
    bool scores_prompt() const { return score_end > score_begin; }
  };
  struct PreparedFork {
    SequenceId parent;
    SequenceId child;
    uint64_t child_epoch = 0;
    std::vector<std::byte*> block_table;
    std::vector<std::pair<const std::byte*, std::byte*>> copies;
  };
  struct DrawOwner {
    SequenceId id;
    uint64_t epoch = 0;
    bool verifies = false;  // a row of a draft block's verification (verify_drafts reads it)
  };
  struct Prepared {
    uint64_t step = 0;
    std::vector<PreparedItem> items;
    std::vector<PreparedFork> forks;
    std::vector<std::pair<SequenceId, int64_t>> restored;
    // The backend draws every token the step needs where the logits are (greedy verification
    // included): no row's logits come to the host.
    bool drawing = false;
    // issue(): how the step computes. issued_pending: the pass was issued on the engine thread and
    // `pending` reads its draws (drawn[i] for owners[i]); else `computing` runs it on a worker.
    bool issued_pending = false;
    std::vector<DrawOwner> owners;
    std::vector<model::DrawnToken> drawn;
    std::unique_ptr<model::PendingDraws> pending;
    std::future<void> computing;
    std::exception_ptr error;  // issue() failed
    // Filled by the compute and collect().
    std::vector<ProducedToken> tokens;
    std::vector<ScoredPrompt> scored_prompts;
    std::vector<std::pair<SnapshotHandle, std::vector<std::byte>>> snapshots;
    // issued_pending: the snapshots begun when the pass was issued, finished by collect().
    std::vector<std::pair<SnapshotHandle, model::Model::PendingSnapshot>> pending_snapshots;
    // Speculative steps: where each verifying sequence's state is after the step
    // (StepResult::computed), and what the step verified.
    std::vector<std::pair<SequenceId, int64_t>> moved;
    SpeculationCounters verified;
    // The draw of `id` (at `epoch`) in this step, or -1.
    int32_t draw_of(SequenceId id, uint64_t epoch) const;
  };

  SequenceContext& context(SequenceId id);
  std::vector<std::byte*> payloads(const std::vector<BlockId>& table);
  // mask: the row's grammar mask when computed ahead (start_masks); null computes it here. A
  // constrained row's logits are masked in place unless `shared` (other draws read the row too).
  ProducedToken sample_for(SequenceId id, uint64_t epoch, std::span<float> logits, bool shared, int64_t position,
                           const std::vector<uint64_t>* mask = nullptr);
  // The grammar masks of the step's constrained rows, computed on a worker thread (the matchers
  // stand at the tokens so far, which the pass does not change), overlapping the forward pass:
  // compute() collects them after it, compute_drawing() when the backend is about to draw.
  // Invalid when no row is constrained.
  struct RowMask {
    SequenceId id;
    std::vector<uint64_t> mask;
  };
  std::future<std::vector<RowMask>> start_masks(const Prepared& prepared);
  // A fresh sequence's history (the prompt, then the request's initial forced tokens) and, when its
  // request is constrained, its matcher.
  void start_sequence(SequenceId id);
  // Jump-forward after `produced` was appended: the forced tokens (appended to the history and the
  // matcher) for the scheduler, each also reported in `out` after the drawn one.
  std::vector<int32_t> jump_forward(SequenceContext& sequence, const ProducedToken& produced);
  // The sampler's inputs for one draw by the backend (model::TokenDraw); `generated` keeps the
  // flattened history the draw points into.
  model::TokenDraw draw_for(SequenceId id, int64_t row, int64_t position,
                            std::vector<model::TokenDraw::Generated>& generated);
  // The step when the backend draws the tokens where the logits are (a GPU): only tokens come
  // back; constrained rows take their masks along, computed while the device runs the pass.
  // issue_only: issue the pass and return (Prepared::pending; its snapshots begun), else compute
  // it to the end.
  void compute_drawing(Prepared& prepared, bool issue_only);
  // The step when the host samples: the forward pass, then the sampler on its logits.
  void compute_on_host(Prepared& prepared);
  // Whether `prepared` can run with the backend's draws: nothing needs a row's logits on the host
  // (prompt scoring, a sampled verification with its distributions).
  bool can_draw(const Prepared& prepared) const;
  // Before a verifying pass: the state each verifying sequence goes back to on a rejection.
  void keep_rollback_states(Prepared& prepared);
  // The parts after the forward: fork copies, snapshots (begun and finished at once unless the
  // pass was issued chained), then the host sampler.
  void run_forks(Prepared& prepared);
  void begin_snapshots(Prepared& prepared);
  void finish_snapshots(Prepared& prepared);
  // All three at once: a step whose pass is done (computed to the end, not left pending).
  void run_forks_and_snapshots(Prepared& prepared);
  void sample_rows(Prepared& prepared, const std::vector<RowMask>& masks);
  // prepared.tokens from the backend's draws.
  void take_drawn(Prepared& prepared);
  // Speculative steps, after the pass: a verifying item's verdict, its tokens and its rollback,
  // from the rows' logits or (Prepared::drawing) the backend's greedy draws of them.
  // Returns the tokens produced (appended to prepared.tokens).
  std::size_t verify_drafts(Prepared& prepared, PreparedItem& item);
  // Every speculative sequence's committed taps into its drafter context, and the next block
  // drafted after each sequence's new last token (all in one drafter call).
  void draft_next(Prepared& prepared);
  static void reset_speculation(SequenceContext& sequence);
  // A sequence's model state that an issued step may still read on the device: kept until the
  // latest issued step has finished.
  void retire(std::optional<model::SequenceState>& state);
  // Destroys the retired states no step after `finished_step` may read.
  void release_retired(uint64_t finished_step);

  const model::Model& model_;
  Scheduler& scheduler_;
  int64_t block_tokens_;
  std::map<RequestId, std::shared_ptr<const RequestSampling>> requests_;
  std::map<RequestId, std::vector<int32_t>> prompts_;
  // Requests with prompt_logprobs: the next prompt index to report (starts at 1). Advanced by
  // finish(), so a step whose sequence was preempted meanwhile leaves it for the recompute.
  std::map<RequestId, int64_t> next_prompt_score_;
  std::map<SequenceId, SequenceContext> sequences_;
  std::deque<Prepared> steps_;  // issued (or prepared) and not finished, oldest first
  struct Retired {
    uint64_t until_step = 0;  // destroyed once this step has finished
    model::SequenceState state;
  };
  std::vector<Retired> retired_;
  SpeculativeMode speculative_mode_ = SpeculativeMode::off;
  StepRateTable step_rates_;
  SpeculationCounters speculation_;
  std::unique_ptr<ConfidenceLog> confidence_log_;
  bool drafting_ = true;
};

}  // namespace deepinfer::engine

#include "engine/step_executor.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <future>
#include <limits>

#include "core/error.h"
#include "core/phase_profile.h"
#include "engine/counter_rng.h"
#include "engine/draft_acceptance.h"
#include "engine/sampling_math.h"

namespace deepinfer::engine {

std::vector<int32_t> initial_forced_tokens(const RequestSampling& sampling) {
  const std::optional<OutputConstraint>& constraint = sampling.params.constraint;
  if (!sampling.jump_forward || !constraint || constraint->after_token >= 0 || sampling.max_tokens < 2) return {};
  grammar::Matcher matcher(constraint->grammar, constraint->vocabulary);
  // One token at least is left to draw: the request's first event comes from a step like any other.
  return grammar::jump_forward(matcher, *constraint->vocabulary, constraint->encode,
                               static_cast<std::size_t>(sampling.max_tokens - 1), sampling.stop_token_ids);
}

StepExecutor::StepExecutor(const model::Model& model, Scheduler& scheduler)
    : model_(model), scheduler_(scheduler), block_tokens_(scheduler.config().block_tokens) {}

void StepExecutor::set_speculation(SpeculativeMode mode, StepRateTable rates) {
  if (mode != SpeculativeMode::off && !model_.drafter())
    fail("engine: speculative decoding needs a model with a drafter (its checkpoint has no DSpark stages)");
  speculative_mode_ = mode;
  step_rates_ = std::move(rates);
  const auto positions = static_cast<std::size_t>(model_.drafter() ? model_.drafter()->block_size() : 0);
  speculation_.verified_by_position.assign(positions, 0);
  speculation_.accepted_by_position.assign(positions, 0);
}

std::vector<DraftOffer> StepExecutor::draft_offers(const StepPlan& plan) const {
  std::vector<DraftOffer> offers;
  if (speculative_mode_ == SpeculativeMode::off || !drafting_) return offers;
  const int64_t block = model_.drafter()->block_size();
  std::vector<DraftOffer> scheduled;  // shares the verify budget
  std::vector<std::optional<std::vector<float>>> lagged;
  std::vector<std::vector<float>> confidences;
  for (const ScheduledSequence& item : plan.sequences) {
    if (!item.needs_logits || item.drafts != 0 || !scheduler_.is_current(item.id, item.epoch)) continue;
    const auto found = sequences_.find(item.id);
    if (found == sequences_.end() || !requests_.at(item.id.request)->speculative) continue;
    const SequenceContext& sequence = found->second;
    if (sequence.drafts.empty() || sequence.drafts_position != item.end) continue;
    if (speculative_mode_ == SpeculativeMode::static_blocks) {
      offers.push_back({item.id, static_cast<int32_t>(sequence.drafts.size())});
      continue;
    }
    scheduled.push_back({item.id, static_cast<int32_t>(sequence.drafts.size())});
    lagged.push_back(sequence.lagged_confidence);
    confidences.push_back(sequence.confidence);
  }
  if (!scheduled.empty()) {
    // The budget from the confidences of the blocks verified last step (independent of this
    // step's draft tokens), shared out by this step's (allocate_verify_lengths: lossless).
    const int64_t budget = verify_budget(lagged, block, step_rates_);
    const std::vector<int32_t> lengths = allocate_verify_lengths(confidences, block, budget);
    for (std::size_t i = 0; i < scheduled.size(); ++i) offers.push_back({scheduled[i].id, lengths[i] - 1});
  }
  return offers;
}

void StepExecutor::add_request(RequestId request, std::shared_ptr<const RequestSampling> sampling,
                               const std::vector<int32_t>& prompt, int32_t choices) {
  requests_[request] = std::move(sampling);
  prompts_[request] = prompt;
  if (requests_[request]->params.prompt_logprobs) next_prompt_score_[request] = 1;
  for (int32_t choice = 0; choice < choices; ++choice) {
    sequences_[SequenceId{request, choice}];
    start_sequence(SequenceId{request, choice});
  }
}

void StepExecutor::start_sequence(SequenceId id) {
  const RequestSampling& request = *requests_.at(id.request);
  SequenceContext& sequence = context(id);
  sequence.history.emplace(prompts_.at(id.request));
  for (int32_t token : request.initial_forced) sequence.history->append(token);
  const std::optional<OutputConstraint>& constraint = request.params.constraint;
  if (!constraint) return;
  sequence.matcher.emplace(constraint->grammar, constraint->vocabulary);
  sequence.constrained = constraint->after_token < 0;
  for (int32_t token : request.initial_forced)
    if (!sequence.matcher->accept_token(token))
      fail("engine: request ", id.request, " forced token ", token, " that its grammar rejects");
}

void StepExecutor::forget_request(RequestId request) {
  requests_.erase(request);
  prompts_.erase(request);
  next_prompt_score_.erase(request);
  const auto first = sequences_.lower_bound(SequenceId{request, 0});
  const auto last = sequences_.lower_bound(SequenceId{request + 1, 0});
  for (auto it = first; it != last; ++it) retire(it->second.state);
  sequences_.erase(first, last);
}

void StepExecutor::retire(std::optional<model::SequenceState>& state) {
  if (state && !steps_.empty()) retired_.push_back(Retired{steps_.back().step, std::move(*state)});
  state.reset();
}

void StepExecutor::drop_state(SequenceId id) {
  const auto found = sequences_.find(id);
  if (found == sequences_.end()) return;
  SequenceContext& sequence = found->second;
  retire(sequence.state);
  reset_speculation(sequence);  // a recompute rebuilds the drafter's context with the target's state
}

void StepExecutor::reset_speculation(SequenceContext& sequence) {
  sequence.draft_context.reset();
  sequence.drafts.clear();
  sequence.drafts_position = -1;
  sequence.draft_logits.clear();
  sequence.confidence.clear();
  sequence.confidence_raw.clear();
  sequence.lagged_confidence.reset();
  sequence.rollback.clear();
  sequence.rollback_length = -1;
}

void StepExecutor::forget_sequence(SequenceId id) {
  const auto found = sequences_.find(id);
  if (found == sequences_.end()) return;
  retire(found->second.state);
  sequences_.erase(found);
}

int32_t StepExecutor::Prepared::draw_of(SequenceId id, uint64_t epoch) const {
  for (std::size_t i = 0; i < owners.size(); ++i)
    if (owners[i].id == id && owners[i].epoch == epoch && !owners[i].verifies) return static_cast<int32_t>(i);
  return -1;
}

bool StepExecutor::can_chain(const StepPlan& plan) const {
  if (steps_.size() != 1 || !model_.chains_draws()) return false;
  // Sequences whose grammar forces bytes after the token being drawn (forced_waiting): chaining
  // draws their next token rather than forcing the run. Worth it while they are fewer than half
  // the step: the overlap saves every sequence's step time, jump-forward only theirs.
  int64_t forced_waiting = 0, continuing = 0;
  const Prepared& previous = steps_.back();
  if (!previous.issued_pending || previous.error || !previous.pending || !previous.forks.empty()) return false;
  if (plan.sequences.empty() || !plan.dropped.empty() || !plan.forks.empty()) return false;
  for (const ScheduledSequence& scheduled : plan.sequences) {
    // Speculative sequences need their rows' logits and taps on the host.
    if (requests_.at(scheduled.id.request)->speculative && drafting_) return false;
    // A restore reads the snapshot store, which finishing the computing step writes.
    if (scheduled.restore != kNoSnapshot) return false;
    if (next_prompt_score_.contains(scheduled.id.request)) return false;
    const auto pending = std::find(scheduled.tokens.begin(), scheduled.tokens.end(), kPendingToken);
    if (pending == scheduled.tokens.end()) continue;  // a prompt chunk: every id is known
    // The next token of a sequence the computing step draws for.
    if (scheduled.tokens.size() != 1 || previous.draw_of(scheduled.id, scheduled.epoch) < 0) return false;
    const auto sequence = sequences_.find(scheduled.id);
    // A matcher whose trigger may be the token being drawn: whether the row is masked depends on it.
    // (A constrained row's mask is computed once that token is drawn: start_masks.)
    if (sequence == sequences_.end() || !sequence->second.state) return false;
    if (sequence->second.matcher && !sequence->second.constrained) return false;
    if (sequence->second.forced_waiting) ++forced_waiting;
    ++continuing;
    const SamplingParams& params = requests_.at(scheduled.id.request)->params;
    // Penalties count the token being drawn.
    if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f || params.repetition_penalty != 1.0f)
      return false;
  }
  return 2 * forced_waiting < std::max<int64_t>(continuing, 1);
}

StepExecutor::SequenceContext& StepExecutor::context(SequenceId id) {
  const auto found = sequences_.find(id);
  if (found == sequences_.end())
    fail("engine: request ", id.request, " choice ", id.choice, " was never added to the executor");
  return found->second;
}

std::vector<std::byte*> StepExecutor::payloads(const std::vector<BlockId>& table) {
  std::vector<std::byte*> out;
  out.reserve(table.size());
  for (BlockId block : table) out.push_back(scheduler_.pool().payload(block).data());
  return out;
}

void StepExecutor::prepare(const StepPlan& plan) {
  if (!steps_.empty() && !can_chain(plan))
    fail("engine: a step was prepared while one computes, and it is not chained on it");
  const Prepared* previous = steps_.empty() ? nullptr : &steps_.back();
  for (SequenceId id : plan.dropped) drop_state(id);
  Prepared prepared;
  prepared.step = plan.step;
  for (const ScheduledSequence& scheduled : plan.sequences) {
    if (!scheduler_.is_current(scheduled.id, scheduled.epoch)) continue;
    SequenceContext& sequence = context(scheduled.id);
    if (scheduled.starts) {
      sequence.state.emplace(model_.new_sequence(block_tokens_, /*external_pages=*/true));
      if (scheduled.restore != kNoSnapshot) {
        sequence.state->pages.blocks = payloads(scheduled.block_table);
        model_.restore_snapshot(*sequence.state, scheduler_.snapshots().load(scheduled.restore));
        prepared.restored.emplace_back(scheduled.id, scheduled.begin);
      }
    }
    if (!sequence.state) fail("engine: request ", scheduled.id.request, " runs without a state");
    if (sequence.state->length != scheduled.begin)
      fail("engine: request ", scheduled.id.request, " choice ", scheduled.id.choice, " is at position ",
           sequence.state->length, " but its step starts at ", scheduled.begin);
    sequence.state->pages.blocks = payloads(scheduled.block_table);
    PreparedItem item;
    item.id = scheduled.id;
    item.epoch = scheduled.epoch;
    item.begin = scheduled.begin;
    item.end = scheduled.end;
    item.tokens = scheduled.tokens;
    if (!item.tokens.empty() && item.tokens.back() == kPendingToken) {
      if (previous) {  // still being drawn: the device hands it over (a placeholder here)
        item.last_token_draw = previous->draw_of(scheduled.id, scheduled.epoch);
        item.tokens.back() = 0;
      } else {
        item.tokens.back() = sequence.last_token;
      }
    }
    if (std::find(item.tokens.begin(), item.tokens.end(), kPendingToken) != item.tokens.end())
      fail("engine: request ", scheduled.id.request, " has a token that was never sampled");
    item.needs_logits = scheduled.needs_logits;
    item.save_snapshot = scheduled.save_snapshot;
    item.committed_end = scheduled.end;
    // While the governor has drafting off, speculative requests step like the others (on a GPU,
    // drawn on the device); their drafter contexts fall behind and restart where drafting resumes.
    if (requests_.at(scheduled.id.request)->speculative && drafting_) {
      item.speculative = true;
      if (scheduled.starts || !sequence.draft_context || sequence.draft_context->length < scheduled.begin) {
        reset_speculation(sequence);
        sequence.draft_context.emplace(model_.drafter()->new_state(scheduled.begin));
      }
      if (scheduled.drafts > 0) {
        if (sequence.drafts_position != scheduled.end || std::cmp_less(sequence.drafts.size(), scheduled.drafts))
          fail("engine: request ", scheduled.id.request, " choice ", scheduled.id.choice, " verifies ",
               scheduled.drafts, " drafts at position ", scheduled.end, " but has ", sequence.drafts.size(),
               " at position ", sequence.drafts_position);
        item.tokens.insert(item.tokens.end(), sequence.drafts.begin(), sequence.drafts.begin() + scheduled.drafts);
        item.drafts = scheduled.drafts;
      }
      item.taps.resize(item.tokens.size() * static_cast<std::size_t>(model_.drafter()->tap_width()));
    }
    // Row p scores prompt token p + 1.
    if (const auto next = next_prompt_score_.find(scheduled.id.request); next != next_prompt_score_.end()) {
      const auto prompt_length = static_cast<int64_t>(prompts_.at(scheduled.id.request).size());
      item.score_begin = std::max(scheduled.begin + 1, next->second);
      item.score_end = std::max(item.score_begin, std::min(scheduled.end + 1, prompt_length));
    }
    prepared.items.push_back(std::move(item));
  }
  prepared.drawing = can_draw(prepared);
  if (!prepared.drawing) {
    const auto vocab = static_cast<std::size_t>(model_.vocab_size());
    for (PreparedItem& item : prepared.items) {
      if (item.scores_prompt() || item.drafts > 0) item.logits.resize(item.tokens.size() * vocab);
      else if (item.needs_logits) item.logits.resize(vocab);
    }
  }
  for (const Fork& fork : plan.forks) {
    if (!scheduler_.is_current(fork.child, fork.child_epoch)) continue;
    PreparedFork prepared_fork{fork.parent, fork.child, fork.child_epoch, payloads(fork.block_table), {}};
    for (const BlockCopy& copy : fork.copies)
      prepared_fork.copies.emplace_back(scheduler_.pool().payload(copy.from).data(),
                                        scheduler_.pool().payload(copy.to).data());
    // A fork happens before the parent's first draw: the child starts where the request starts.
    start_sequence(fork.child);
    prepared.forks.push_back(std::move(prepared_fork));
  }
  steps_.push_back(std::move(prepared));
}

std::future<std::vector<StepExecutor::RowMask>> StepExecutor::start_masks(const Prepared& prepared) {
  struct Job {
    SequenceId id;
    grammar::Matcher* matcher;
    int32_t vocabulary_size;
    int32_t pending_draw;  // chained: the row's last token is this draw of the step before, not known yet
  };
  std::vector<Job> jobs;
  const auto add = [&](SequenceId id, int32_t pending_draw) {
    SequenceContext& sequence = context(id);
    if (!sequence.constrained) return;
    jobs.push_back({id, &*sequence.matcher, requests_.at(id.request)->params.constraint->vocabulary->size(), pending_draw});
  };
  for (const PreparedItem& item : prepared.items) {
    if (!item.needs_logits) continue;
    add(item.id, item.last_token_draw);
    for (const PreparedFork& fork : prepared.forks)
      if (fork.parent == item.id) add(fork.child, -1);
  }
  if (jobs.empty()) return {};
  // A chained step's rows continue the computing step's draws: their masks need those tokens,
  // which the worker reads when the device has drawn them (the pass it issues meanwhile does not
  // need them on the host), takes into the matcher for the mask and gives back (finish() takes
  // them for good). The engine thread waits for these masks before it reads the computing
  // step's draws or touches a matcher, so the worker has both to itself.
  const Prepared* computing = &prepared == &steps_.back() && steps_.size() > 1 ? &steps_[steps_.size() - 2] : nullptr;
  model::PendingDraws* source = computing ? computing->pending.get() : nullptr;
  const std::size_t source_draws = computing ? computing->owners.size() : 0;
  return std::async(std::launch::async, [jobs = std::move(jobs), source, source_draws] {
    std::vector<model::DrawnToken> drawn;
    if (source && std::any_of(jobs.begin(), jobs.end(), [](const Job& job) { return job.pending_draw >= 0; })) {
      drawn.resize(source_draws);
      source->wait(drawn);
    }
    std::vector<RowMask> masks;
    for (const Job& job : jobs) {
      RowMask row{job.id, std::vector<uint64_t>(static_cast<std::size_t>((job.vocabulary_size + 63) / 64))};
      if (job.pending_draw >= 0 && static_cast<std::size_t>(job.pending_draw) < drawn.size()) {
        // A finished matcher, or a token the grammar refused (which the computing step's own
        // mask rules out), leaves the mask empty: the row is not read (the sequence ends, or
        // finish() fails the computing step's token first).
        if (!job.matcher->finished() && job.matcher->accept_token(drawn[static_cast<std::size_t>(job.pending_draw)].token)) {
          job.matcher->fill_mask(row.mask);
          job.matcher->rollback(1);
        }
      } else {
        job.matcher->fill_mask(row.mask);
      }
      masks.push_back(std::move(row));
    }
    return masks;
  });
}

namespace {

// logits[i] = -inf wherever the mask forbids token i (and for ids at or past allowed_ids, the
// grammar's vocabulary), word by word; true when an allowed token's logit is a number.
bool mask_logits(std::span<float> logits, std::span<const uint64_t> mask, std::size_t allowed_ids) {
  constexpr float kForbidden = -std::numeric_limits<float>::infinity();
  bool any = false;
  for (std::size_t base = 0; base < logits.size(); base += 64) {
    const std::size_t end = std::min(logits.size(), base + 64);
    uint64_t word = base < allowed_ids ? mask[base / 64] : 0;
    if (allowed_ids < end && allowed_ids > base) word &= (uint64_t{1} << (allowed_ids - base)) - 1;
    if (word == 0) {
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(base), logits.begin() + static_cast<std::ptrdiff_t>(end),
                kForbidden);
      continue;
    }
    for (std::size_t i = base; i < end; ++i) {
      if ((word >> (i - base)) & 1) any = any || logits[i] == logits[i];
      else logits[i] = kForbidden;
    }
  }
  return any;
}

}  // namespace

ProducedToken StepExecutor::sample_for(SequenceId id, uint64_t epoch, std::span<float> logits, bool shared,
                                       int64_t position, const std::vector<uint64_t>* ahead) {
  const RequestSampling& request = *requests_.at(id.request);
  SequenceContext& sequence = context(id);
  if (!sequence.constrained) {
    const SampleResult result = sample(logits, request.params, *sequence.history, request.seed,
                                       static_cast<uint64_t>(id.choice), position);
    return ProducedToken{id, epoch, result.token, result.logprob, result.top_logprobs, false};
  }
  // Tokens the grammar rejects get -inf: the draw, the penalties and the reported logprobs all
  // see the constrained distribution.
  const grammar::Vocabulary& vocabulary = *request.params.constraint->vocabulary;
  std::vector<uint64_t> computed;
  if (!ahead) {
    computed.resize(static_cast<std::size_t>((vocabulary.size() + 63) / 64));
    sequence.matcher->fill_mask(computed);
  }
  const std::vector<uint64_t>& mask = ahead ? *ahead : computed;
  // A row another draw reads too (a fork's children sample their parent's row) is masked in a copy.
  std::vector<float> copy;
  if (shared) copy.assign(logits.begin(), logits.end());
  const std::span<float> masked = shared ? std::span<float>(copy) : logits;
  if (!mask_logits(masked, mask, static_cast<std::size_t>(vocabulary.size()))) {
    // No token can continue (the grammar is complete and closed, or the model's logits are NaN
    // where it could): the answer ends here.
    return ProducedToken{id, epoch, vocabulary.eos(), 0.0f, {}, false};
  }
  const SampleResult result = sample(masked, request.params, *sequence.history, request.seed,
                                     static_cast<uint64_t>(id.choice), position);
  return ProducedToken{id, epoch, result.token, result.logprob, result.top_logprobs, false};
}

model::TokenDraw StepExecutor::draw_for(SequenceId id, int64_t row, int64_t position,
                                        std::vector<model::TokenDraw::Generated>& generated) {
  const RequestSampling& request = *requests_.at(id.request);
  const SamplingParams& params = request.params;
  const TokenHistory& history = *context(id).history;
  model::TokenDraw draw;
  draw.row = row;
  draw.temperature = params.temperature;
  draw.top_p = params.top_p;
  draw.min_p = params.min_p;
  draw.top_k = params.top_k;
  draw.presence_penalty = params.presence_penalty;
  draw.frequency_penalty = params.frequency_penalty;
  draw.repetition_penalty = params.repetition_penalty;
  draw.seed = request.seed;
  draw.request_id = static_cast<uint64_t>(id.choice);
  draw.position = position;
  draw.logprobs = params.logprobs ? *params.logprobs : -1;
  draw.prompt_tokens = history.prompt_tokens_distinct();
  for (const GeneratedTokenCount& seen : history.generated_counts())
    generated.push_back({seen.token, seen.count, seen.in_prompt});
  draw.logit_bias.assign(params.logit_bias.begin(), params.logit_bias.end());
  return draw;
}

bool StepExecutor::can_draw(const Prepared& prepared) const {
  if (!model_.backend().draws_tokens()) return false;
  // A speculative sampled request's drafts are verified against its distributions on the host
  // (and its drafter context follows the tokens the host draws).
  return std::none_of(prepared.items.begin(), prepared.items.end(), [&](const PreparedItem& item) {
    return item.scores_prompt() || (item.speculative && !requests_.at(item.id.request)->params.greedy());
  });
}

void StepExecutor::keep_rollback_states(Prepared& prepared) {
  for (const PreparedItem& item : prepared.items) {
    SequenceContext& sequence = context(item.id);
    // The state a rejection in the step before restored is still there.
    if (item.drafts == 0 || sequence.rollback_length == item.begin) continue;
    const ScopedPhase timed("host step: rollback snapshot");
    sequence.rollback = model_.save_snapshot(*sequence.state);
    sequence.rollback_length = item.begin;
  }
}

void StepExecutor::compute_drawing(Prepared& prepared, bool issue_only) {
  std::vector<model::BatchItem> batch;
  // Each item that needs a token asks for its last row; its draws (and its forks' children's,
  // which sample the same row) read head row `row`.
  std::vector<model::TokenDraw> draws;
  std::vector<std::vector<model::TokenDraw::Generated>> histories;
  prepared.owners.clear();
  // A verifying item asks for every row and draws greedily from its last drafts + 1 (the rows
  // before are kept tokens computed again after a rejection).
  for (PreparedItem& item : prepared.items) {
    const model::LogitRows rows = item.drafts > 0    ? model::LogitRows::All
                                  : item.needs_logits ? model::LogitRows::Last
                                                      : model::LogitRows::None;
    batch.push_back(model::BatchItem{&*context(item.id).state, item.tokens, {}, rows, item.last_token_draw, item.taps});
    if (!item.needs_logits) continue;
    if (item.drafts > 0) {
      item.first_verify_draw = prepared.owners.size();
      for (int32_t k = 0; k <= item.drafts; ++k) prepared.owners.push_back({item.id, item.epoch, true});
      continue;
    }
    prepared.owners.push_back({item.id, item.epoch});
    for (const PreparedFork& fork : prepared.forks)
      if (fork.parent == item.id) prepared.owners.push_back({fork.child, fork.child_epoch});
  }
  histories.resize(prepared.owners.size());
  int64_t row = 0;
  std::size_t owner = 0;
  for (PreparedItem& item : prepared.items) {
    if (item.drafts > 0) {
      const auto first_row = static_cast<int64_t>(item.tokens.size()) - item.drafts - 1;
      for (int32_t k = 0; k <= item.drafts; ++k) {
        draws.push_back(draw_for(item.id, row + first_row + k, item.end + k, histories[owner]));
        ++owner;
      }
      row += static_cast<int64_t>(item.tokens.size());
      continue;
    }
    if (!item.needs_logits) continue;
    draws.push_back(draw_for(item.id, row, item.end, histories[owner]));
    ++owner;
    for (const PreparedFork& fork : prepared.forks)
      if (fork.parent == item.id) {
        draws.push_back(draw_for(fork.child, row, item.end, histories[owner]));
        ++owner;
      }
    ++row;
  }
  for (std::size_t i = 0; i < draws.size(); ++i) draws[i].generated = histories[i];
  // The constrained rows' masks are computed on a worker while the device runs the pass; the
  // backend waits for them (before_draw) only when it is about to read the draws.
  std::future<std::vector<RowMask>> masks_ahead = start_masks(prepared);
  std::vector<RowMask> masks;
  const std::function<void()> attach_masks = [&] {
    if (!masks_ahead.valid()) return;
    masks = masks_ahead.get();
    for (std::size_t i = 0; i < draws.size(); ++i)
      for (const RowMask& mask : masks)
        if (mask.id == prepared.owners[i].id) {
          draws[i].mask = mask.mask;
          draws[i].mask_fallback_token = requests_.at(mask.id.request)->params.constraint->vocabulary->eos();
        }
  };
  prepared.drawn.assign(draws.size(), {});
  // (If the pass throws, masks_ahead's destructor waits for the worker, which reads the matchers.)
  if (issue_only) {
    // A step prepared behind one still computing takes its rows' tokens from that step's draws.
    const model::PendingDraws* source = steps_.size() > 1 ? steps_[steps_.size() - 2].pending.get() : nullptr;
    prepared.pending = model_.issue_batch_draw(batch, draws, attach_masks, source);
    begin_snapshots(prepared);  // before a chained pass moves the states on
    return;
  }
  keep_rollback_states(prepared);
  {
    const ScopedPhase timed("host step: forward");
    model_.forward_batch_draw(batch, draws, prepared.drawn, attach_masks);
  }
  run_forks_and_snapshots(prepared);
  take_drawn(prepared);
  if (std::none_of(prepared.items.begin(), prepared.items.end(), [](const PreparedItem& item) { return item.speculative; }))
    return;
  {
    const ScopedPhase timed("host step: verify");
    for (PreparedItem& item : prepared.items)
      if (item.drafts > 0) verify_drafts(prepared, item);
  }
  const ScopedPhase timed("host step: draft next");
  draft_next(prepared);
}

void StepExecutor::take_drawn(Prepared& prepared) {
  for (std::size_t i = 0; i < prepared.drawn.size(); ++i) {
    if (prepared.owners[i].verifies) continue;
    const model::DrawnToken& drawn = prepared.drawn[i];
    ProducedToken produced{prepared.owners[i].id, prepared.owners[i].epoch, drawn.token, drawn.logprob, {}, false};
    for (const auto& [token, logprob] : drawn.top_logprobs) produced.top_logprobs.push_back({token, logprob});
    prepared.tokens.push_back(std::move(produced));
  }
}

void StepExecutor::issue() {
  if (steps_.empty()) fail("engine: issue() without a prepared step");
  Prepared& prepared = steps_.back();
  try {
    // The backend draws the tokens itself (constrained rows with their masks) unless a row's
    // logits must come back (prompt scoring).
    const bool drawing = prepared.drawing;
    // A speculative step's verdicts and drafts are made on the host once its draws are back.
    const bool speculative = std::any_of(prepared.items.begin(), prepared.items.end(),
                                         [](const PreparedItem& item) { return item.speculative; });
    if (drawing && model_.chains_draws() && !speculative) {
      prepared.issued_pending = true;
      compute_drawing(prepared, /*issue_only=*/true);
      return;
    }
    // (A deque's elements stay where they are while others are added or removed.)
    prepared.computing = std::async(std::launch::async, [this, &prepared, drawing] {
      if (drawing) compute_drawing(prepared, /*issue_only=*/false);
      else compute_on_host(prepared);
    });
  } catch (...) {
    prepared.error = std::current_exception();
  }
}

void StepExecutor::collect() {
  if (steps_.empty()) fail("engine: collect() without an issued step");
  Prepared& prepared = steps_.front();
  if (prepared.error) std::rethrow_exception(prepared.error);
  if (prepared.computing.valid()) {
    prepared.computing.get();
    return;
  }
  if (!prepared.issued_pending) return;
  if (prepared.pending) {
    prepared.pending->wait(prepared.drawn);
    prepared.pending.reset();
  }
  run_forks(prepared);
  finish_snapshots(prepared);
  take_drawn(prepared);
}

void StepExecutor::compute_on_host(Prepared& prepared) {
  std::vector<model::BatchItem> batch;
  for (PreparedItem& item : prepared.items) {
    const model::LogitRows rows = item.scores_prompt() || item.drafts > 0 ? model::LogitRows::All
                                  : item.needs_logits                     ? model::LogitRows::Last
                                                                          : model::LogitRows::None;
    batch.push_back(model::BatchItem{&*context(item.id).state, item.tokens, item.logits, rows, -1, item.taps});
  }
  keep_rollback_states(prepared);
  std::future<std::vector<RowMask>> masks_ahead = start_masks(prepared);
  {
    const ScopedPhase timed("host step: forward");
    model_.forward_batch(batch);
  }
  const std::vector<RowMask> masks = masks_ahead.valid() ? masks_ahead.get() : std::vector<RowMask>{};
  run_forks_and_snapshots(prepared);
  {
    const ScopedPhase timed("host step: sample and verify");
    sample_rows(prepared, masks);
  }
  if (std::any_of(prepared.items.begin(), prepared.items.end(), [](const PreparedItem& item) { return item.speculative; })) {
    const ScopedPhase timed("host step: draft next");
    draft_next(prepared);
  }
}

void StepExecutor::run_forks(Prepared& prepared) {
  for (PreparedFork& fork : prepared.forks) {
    const model::SequenceState& parent = *context(fork.parent).state;
    const model::CachePages& parent_pages = parent.pages;
    const model::CacheMemory& memory = scheduler_.pool().memory();
    for (const auto& [from, to] : fork.copies) memory.copy(to, from, parent_pages.block_bytes);
    SequenceContext& child = context(fork.child);
    child.state.emplace(model_.new_sequence(block_tokens_, /*external_pages=*/true));
    child.state->pages.blocks = fork.block_table;
    model_.restore_snapshot(*child.state, model_.save_snapshot(parent));
  }
}

void StepExecutor::run_forks_and_snapshots(Prepared& prepared) {
  run_forks(prepared);
  begin_snapshots(prepared);
  finish_snapshots(prepared);
}

void StepExecutor::begin_snapshots(Prepared& prepared) {
  for (PreparedItem& item : prepared.items)
    if (item.save_snapshot != kNoSnapshot)
      prepared.pending_snapshots.emplace_back(item.save_snapshot, model_.begin_snapshot(*context(item.id).state));
}

void StepExecutor::finish_snapshots(Prepared& prepared) {
  for (auto& [handle, pending] : prepared.pending_snapshots)
    prepared.snapshots.emplace_back(handle, model_.finish_snapshot(pending));
  prepared.pending_snapshots.clear();
}

void StepExecutor::sample_rows(Prepared& prepared, const std::vector<RowMask>& masks) {
  const auto vocab = static_cast<std::size_t>(model_.vocab_size());
  const auto mask_of = [&](SequenceId id) -> const std::vector<uint64_t>* {
    for (const RowMask& row : masks)
      if (row.id == id) return &row.mask;
    return nullptr;
  };
  for (PreparedItem& item : prepared.items) {
    if (item.scores_prompt()) {
      const std::vector<int32_t>& prompt = prompts_.at(item.id.request);
      const int32_t alternatives = *requests_.at(item.id.request)->params.prompt_logprobs;
      ScoredPrompt scored{item.id, item.epoch, item.score_begin, {}};
      for (int64_t index = item.score_begin; index < item.score_end; ++index) {
        const auto row = static_cast<std::size_t>(index - 1 - item.begin);
        scored.scores.push_back(score_token(std::span<const float>(item.logits).subspan(row * vocab, vocab),
                                            prompt[static_cast<std::size_t>(index)], alternatives));
      }
      prepared.scored_prompts.push_back(std::move(scored));
    }
    if (!item.needs_logits) continue;
    if (item.drafts > 0) {
      verify_drafts(prepared, item);
      continue;
    }
    const std::span<float> last_row = std::span<float>(item.logits).last(vocab);
    const bool shared = std::any_of(prepared.forks.begin(), prepared.forks.end(),
                                    [&](const PreparedFork& fork) { return fork.parent == item.id; });
    prepared.tokens.push_back(sample_for(item.id, item.epoch, last_row, shared, item.end, mask_of(item.id)));
    for (const PreparedFork& fork : prepared.forks)
      if (fork.parent == item.id)
        prepared.tokens.push_back(
            sample_for(fork.child, fork.child_epoch, last_row, shared, item.end, mask_of(fork.child)));
  }
}

StepExecutor::Abandoned StepExecutor::abandon() {
  if (steps_.empty()) fail("engine: abandon() without an issued step");
  Abandoned out;
  {
    Prepared& prepared = steps_.front();
    out.step = prepared.step;
    for (const PreparedItem& item : prepared.items) out.sequences.push_back(item.id);
    for (const PreparedFork& fork : prepared.forks) out.sequences.push_back(fork.child);
    // A chained step's device work (its pass, its snapshots' copies) may still be queued: wait
    // for it before what it writes can go.
    try {
      if (prepared.pending) prepared.pending->wait(prepared.drawn);
      prepared.pending.reset();
      finish_snapshots(prepared);
    } catch (const Error&) {  // the step failed already; this is the same failure
    }
  }
  steps_.pop_front();
  release_retired(out.step);
  return out;
}

void StepExecutor::release_retired(uint64_t finished_step) {
  std::erase_if(retired_, [&](const Retired& retired) { return retired.until_step <= finished_step; });
}

namespace {

// The row as the sampler's argmax reads it: NaN as -inf, penalties and bias applied.
std::vector<float> processed_logits(std::span<const float> row, const SamplingParams& params,
                                    const TokenHistory& history) {
  std::vector<float> out(row.size());
  std::transform(row.begin(), row.end(), out.begin(),
                 [](float logit) { return logit != logit ? -std::numeric_limits<float>::infinity() : logit; });
  apply_penalties_and_bias(out, params, history);
  return out;
}

}  // namespace

std::size_t StepExecutor::verify_drafts(Prepared& prepared, PreparedItem& item) {
  const RequestSampling& request = *requests_.at(item.id.request);
  const SamplingParams& params = request.params;
  SequenceContext& sequence = context(item.id);
  const auto vocab = static_cast<std::size_t>(model_.vocab_size());
  const auto drafted = static_cast<std::size_t>(item.drafts);
  // Row i predicts the token after the i-th verified one: row 0 the one after the anchor.
  const std::size_t first_row = item.tokens.size() - drafted - 1;
  const auto row = [&](std::size_t i) {
    return std::span<const float>(item.logits).subspan((first_row + i) * vocab, vocab);
  };
  const std::span<const int32_t> drafts = std::span<const int32_t>(item.tokens).last(drafted);
  // Drawn: the backend's greedy draws of rows 0 .. drafted (can_draw keeps sampled requests off it).
  const std::span<const model::DrawnToken> drawn =
      prepared.drawing ? std::span<const model::DrawnToken>(prepared.drawn).subspan(item.first_verify_draw, drafted + 1)
                       : std::span<const model::DrawnToken>{};
  DraftVerdict verdict;
  std::vector<SampleResult> replayed;  // exact_replay: row i's draw
  if (prepared.drawing) {
    std::vector<int32_t> target_tokens;
    for (const model::DrawnToken& token : drawn) target_tokens.push_back(token.token);
    verdict = accept_greedy_tokens(target_tokens, drafts, request.stop_token_ids);
  } else if (request.exact_replay) {
    // Row i draws with the sampler's own uniform at its position: the token the engine draws there
    // without speculation, its log-probability as the sampler reports it.
    std::vector<int32_t> target_tokens;
    for (std::size_t i = 0; i <= drafted; ++i) {
      replayed.push_back(sample(row(i), params, *sequence.history, request.seed, static_cast<uint64_t>(item.id.choice),
                                item.end + static_cast<int64_t>(i)));
      target_tokens.push_back(replayed.back().token);
    }
    verdict = accept_greedy_tokens(target_tokens, drafts, request.stop_token_ids);
  } else if (params.greedy()) {
    std::vector<std::vector<float>> processed;
    std::vector<std::span<const float>> rows;
    for (std::size_t i = 0; i <= drafted; ++i) processed.push_back(processed_logits(row(i), params, *sequence.history));
    for (const std::vector<float>& processed_row : processed) rows.emplace_back(processed_row);
    verdict = accept_greedy(rows, drafts, request.stop_token_ids);
  } else {
    const ScopedPhase timed("verify: sampled distributions");
    std::vector<std::vector<float>> target(drafted + 1), draft(drafted);
    for (std::size_t i = 0; i <= drafted; ++i) token_distribution(row(i), params, *sequence.history, target[i]);
    for (std::size_t i = 0; i < drafted; ++i)
      token_distribution(std::span<const float>(sequence.draft_logits).subspan(i * vocab, vocab), params,
                         *sequence.history, draft[i]);
    const std::vector<std::span<const float>> target_rows(target.begin(), target.end());
    const std::vector<std::span<const float>> draft_rows(draft.begin(), draft.end());
    verdict = accept_sampled(target_rows, draft_rows, drafts, request.stop_token_ids,
                             VerifyStream{request.seed, static_cast<uint64_t>(item.id.choice), item.end});
  }
  SpeculationCounters& counters = prepared.verified;
  ++counters.rounds;
  counters.draft_tokens += item.drafts;
  counters.accepted_tokens += verdict.accepted;
  counters.verified_by_position.resize(std::max(counters.verified_by_position.size(), drafted));
  counters.accepted_by_position.resize(std::max(counters.accepted_by_position.size(), drafted));
  for (std::size_t k = 0; k < drafted; ++k) ++counters.verified_by_position[k];
  for (int32_t k = 0; k < verdict.accepted; ++k) ++counters.accepted_by_position[static_cast<std::size_t>(k)];
  // Whole blocks only (max_tokens can trim one): a trimmed block says nothing of its later drafts.
  if (confidence_log_ && drafted == sequence.confidence_raw.size())
    confidence_log_->write(ConfidenceRound{sequence.confidence_raw, verdict.accepted});

  std::vector<int32_t> kept(drafts.begin(), drafts.begin() + verdict.accepted);
  if (verdict.bonus >= 0) kept.push_back(verdict.bonus);
  const int64_t room = request.max_tokens - sequence.history->generated_length();
  if (std::cmp_greater(kept.size(), room)) kept.resize(static_cast<std::size_t>(std::max<int64_t>(room, 0)));
  for (std::size_t i = 0; i < kept.size(); ++i) {
    // No log-probability unless asked, as the sampler reports it.
    ProducedToken produced{item.id, item.epoch, kept[i], SampleResult{}.logprob, {}, false, i > 0};
    if (params.logprobs && prepared.drawing) {  // the draw at row i is kept[i]
      produced.logprob = drawn[i].logprob;
      for (const auto& [token, logprob] : drawn[i].top_logprobs) produced.top_logprobs.push_back({token, logprob});
    } else if (params.logprobs && !replayed.empty()) {
      produced.logprob = replayed[i].logprob;
      produced.top_logprobs = replayed[i].top_logprobs;
    } else if (params.logprobs) {
      const SampleResult scored = score_token(row(i), kept[i], *params.logprobs);
      produced.logprob = scored.logprob;
      produced.top_logprobs = scored.top_logprobs;
    }
    prepared.tokens.push_back(std::move(produced));
  }
  // Every draft kept: the state is past them. Otherwise back to where the step began; the kept
  // positions are computed again, with the next drafts, by the next step (no pass of its own).
  const bool all_kept = verdict.accepted == item.drafts;
  item.committed_end = item.end + verdict.accepted;
  if (all_kept) {
    sequence.rollback_length = -1;
    prepared.moved.emplace_back(item.id, item.end + item.drafts);
  } else {
    ++counters.rollbacks;
    const ScopedPhase timed("verify: rollback restore");
    model_.restore_snapshot(*sequence.state, sequence.rollback);
    prepared.moved.emplace_back(item.id, item.begin);
  }
  return kept.size();
}

void StepExecutor::draft_next(Prepared& prepared) {
  const model::Drafter& drafter = *model_.drafter();
  const auto width = static_cast<std::size_t>(drafter.tap_width());
  // The committed positions' taps into each context; a fork's children start from their parent's.
  for (PreparedItem& item : prepared.items) {
    if (!item.speculative) continue;
    SequenceContext& sequence = context(item.id);
    model::DraftState& draft_context = *sequence.draft_context;
    if (draft_context.length < item.begin)
      fail("engine: request ", item.id.request, " choice ", item.id.choice, " drafts from position ",
           draft_context.length, " but its step began at ", item.begin);
    if (item.committed_end > draft_context.length) {
      const auto skip = static_cast<std::size_t>(draft_context.length - item.begin);
      const auto rows = static_cast<std::size_t>(item.committed_end - draft_context.length);
      const ScopedPhase timed("draft next: inject");
      drafter.inject(draft_context, std::span<const float>(item.taps).subspan(skip * width, rows * width));
    }
    for (const PreparedFork& fork : prepared.forks)
      if (fork.parent == item.id) context(fork.child).draft_context = draft_context;
  }
  // Each continuing sequence's last token this step is the next block's anchor.
  std::map<SequenceId, std::pair<int32_t, int64_t>> anchors;  // token, tokens this step
  for (const ProducedToken& produced : prepared.tokens) {
    auto& [token, count] = anchors[produced.id];
    token = produced.token;
    ++count;
  }
  std::vector<model::DraftRequest> requests;
  std::vector<SequenceContext*> owners;
  std::vector<bool> keeps_distributions;  // speculative sampling divides by the draft's
  std::vector<float> distribution;  // the pick's scratch (draft() calls it on this thread)
  for (const auto& [id, anchor] : anchors) {
    const RequestSampling& request = *requests_.at(id.request);
    if (!request.speculative) continue;
    SequenceContext& sequence = context(id);
    const auto& [token, count] = anchor;
    const bool stops = std::find(request.stop_token_ids.begin(), request.stop_token_ids.end(), token) !=
                       request.stop_token_ids.end();
    if (!drafting_ || stops || sequence.history->generated_length() + count >= request.max_tokens ||
        !sequence.draft_context) {
      sequence.drafts.clear();
      continue;
    }
    const int64_t first = sequence.draft_context->length + 1;  // the position of draft 0
    model::DraftRequest draft{&*sequence.draft_context, token, {}};
    const SamplingParams& params = request.params;
    if (!params.greedy() || !params.logit_bias.empty()) {
      // Drafts are drawn from the request's own transform of the drafter's logits: the
      // distribution speculative sampling divides by, with uniforms of their own (kDraftDraw). An
      // exact replay draws each draft with the uniform the target's sampler will use at its
      // position (kTokenDraw): where the two distributions are close, the two inverse CDFs land
      // on the same token, and the draft is kept.
      const TokenHistory& history = *sequence.history;
      const uint64_t seed = request.seed, stream = static_cast<uint64_t>(id.choice);
      const uint32_t draw_index = request.exact_replay ? kTokenDraw : kDraftDraw;
      draft.pick = [&params, &history, &distribution, seed, stream, first, draw_index](std::span<const float> logits,
                                                                                      int64_t k) {
        token_distribution(logits, params, history, distribution);
        return invert_cdf(distribution, CounterRng(seed, stream, first + k).uniform(draw_index));
      };
    }
    keeps_distributions.push_back(draft.pick && !request.exact_replay);
    requests.push_back(std::move(draft));
    owners.push_back(&sequence);
  }
  if (requests.empty()) return;
  std::vector<model::DraftBlock> blocks;
  {
    const ScopedPhase timed("draft next: draft");
    blocks = drafter.draft(requests, model_.backend());
  }
  for (std::size_t r = 0; r < blocks.size(); ++r) {
    SequenceContext& sequence = *owners[r];
    model::DraftBlock& block = blocks[r];
    sequence.drafts = std::move(block.tokens);
    sequence.drafts_position = sequence.draft_context->length + 1;
    // Greedy verification and exact replays read only the tokens; speculative sampling the
    // distributions.
    if (keeps_distributions[r]) sequence.draft_logits = std::move(block.logits);
    else sequence.draft_logits.clear();
    if (!sequence.confidence.empty()) sequence.lagged_confidence = std::move(sequence.confidence);
    sequence.confidence = std::move(block.confidence);
    sequence.confidence_raw = std::move(block.confidence_raw);
    prepared.verified.drafted_tokens += static_cast<int64_t>(sequence.drafts.size());
  }
}

StepExecutor::Finished StepExecutor::finish() {
  if (steps_.empty()) fail("engine: finish() without an issued step");
  Prepared prepared = std::move(steps_.front());
  steps_.pop_front();
  release_retired(prepared.step);
  for (auto& [handle, bytes] : prepared.snapshots) scheduler_.snapshots().write(handle, bytes);
  Finished out;
  out.step = prepared.step;
  out.restored = std::move(prepared.restored);
  for (const PreparedItem& item : prepared.items) out.tokens_computed += static_cast<int64_t>(item.tokens.size());
  for (ScoredPrompt& scored : prepared.scored_prompts) {
    if (!scheduler_.is_current(scored.id, scored.epoch)) continue;
    int64_t& next = next_prompt_score_.at(scored.id.request);
    if (scored.first_index != next) continue;  // another choice reported them already
    next += static_cast<int64_t>(scored.scores.size());
    out.scored_prompts.push_back(std::move(scored));
  }
  for (ProducedToken& produced : prepared.tokens) {
    // Preempted while the step computed: the scheduler ignores its token, so must the history.
    if (!scheduler_.is_current(produced.id, produced.epoch)) continue;
    SequenceContext& sequence = context(produced.id);
    if (produced.continues) {  // a speculative step's next kept token: its result goes on
      StepResult& result = out.results.back();
      if (result.id != produced.id) fail("engine: a continuing token of another sequence");
      const std::vector<int32_t>& stops = requests_.at(produced.id.request)->stop_token_ids;
      sequence.history->append(produced.token);
      sequence.last_token = produced.token;
      result.forced.push_back(produced.token);
      result.stop = std::find(stops.begin(), stops.end(), produced.token) != stops.end();
      out.tokens.push_back(std::move(produced));
      continue;
    }
    if (!sequence.initial_reported) {  // computed with the prompt, reported before the first draw
      sequence.initial_reported = true;
      for (int32_t token : requests_.at(produced.id.request)->initial_forced)
        out.tokens.push_back(ProducedToken{produced.id, produced.epoch, token, 0.0f, {}, true});
    }
    sequence.history->append(produced.token);
    sequence.last_token = produced.token;
    if (sequence.matcher) {
      const OutputConstraint& constraint = *requests_.at(produced.id.request)->params.constraint;
      if (sequence.constrained) {
        // The token came from the masked row, so the matcher takes it; EOS finishes it.
        if (!sequence.matcher->finished() && !sequence.matcher->accept_token(produced.token))
          fail("engine: request ", produced.id.request, " sampled token ", produced.token,
               " that its grammar rejects");
      } else if (produced.token == constraint.after_token) {
        sequence.constrained = true;
      }
    }
    const std::vector<int32_t>& stops = requests_.at(produced.id.request)->stop_token_ids;
    const bool stop = std::find(stops.begin(), stops.end(), produced.token) != stops.end();
    StepResult result{produced.id, produced.token, stop, {}};
    // Not while a chained step computes the sequence's next token: that step draws it, under the
    // mask after this token, so forced bytes are drawn there (as with --no-jump-forward).
    const bool next_computing = !steps_.empty() && std::any_of(steps_.front().items.begin(), steps_.front().items.end(),
                                                              [&](const PreparedItem& item) { return item.id == produced.id; });
    if (!stop && !next_computing) result.forced = jump_forward(sequence, produced);
    sequence.forced_waiting = !stop && next_computing && sequence.constrained && requests_.at(produced.id.request)->jump_forward &&
                              !sequence.matcher->finished() && !sequence.matcher->forced_bytes().empty();
    out.results.push_back(result);
    const SequenceId id = produced.id;
    const uint64_t epoch = produced.epoch;
    out.tokens.push_back(std::move(produced));
    for (int32_t token : result.forced) out.tokens.push_back(ProducedToken{id, epoch, token, 0.0f, {}, true});
  }
  for (const auto& [id, computed] : prepared.moved)
    for (StepResult& result : out.results)
      if (result.id == id) result.computed = computed;
  const SpeculationCounters& verified = prepared.verified;
  speculation_.rounds += verified.rounds;
  speculation_.draft_tokens += verified.draft_tokens;
  speculation_.accepted_tokens += verified.accepted_tokens;
  speculation_.drafted_tokens += verified.drafted_tokens;
  speculation_.rollbacks += verified.rollbacks;
  for (std::size_t k = 0; k < verified.verified_by_position.size() && k < speculation_.verified_by_position.size(); ++k) {
    speculation_.verified_by_position[k] += verified.verified_by_position[k];
    speculation_.accepted_by_position[k] += verified.accepted_by_position[k];
  }
  return out;
}

std::vector<int32_t> StepExecutor::jump_forward(SequenceContext& sequence, const ProducedToken& produced) {
  const RequestSampling& request = *requests_.at(produced.id.request);
  if (!request.jump_forward || !sequence.constrained || sequence.matcher->finished()) return {};
  const int64_t room = request.max_tokens - sequence.history->generated_length();
  if (room <= 0) return {};
  const OutputConstraint& constraint = *request.params.constraint;
  std::vector<int32_t> forced = grammar::jump_forward(*sequence.matcher, *constraint.vocabulary, constraint.encode,
                                                      static_cast<std::size_t>(room), request.stop_token_ids);
  for (int32_t token : forced) sequence.history->append(token);
  return forced;
}

}  // namespace deepinfer::engine

#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/phase_profile.h"
#include "engine/counter_rng.h"
#include "engine/scheduler.h"
#include "engine/step_executor.h"
#include "model/model.h"

namespace deepinfer::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "unknown";
}

std::optional<StreamEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const auto has_event = [&] { return !events_.empty(); };
  if (timeout == std::chrono::milliseconds::max()) ready_.wait(lock, has_event);
  else if (!ready_.wait_for(lock, timeout, has_event)) return std::nullopt;
  StreamEvent event = std::move(events_.front());
  events_.pop_front();
  if (event.finish) ++finished_read_;
  return event;
}

bool RequestStream::done() const {
  std::lock_guard lock(mutex_);
  return finished_read_ == choices_ && events_.empty();
}

void RequestStream::push(StreamEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
    if (listener_) listener_();
  }
  ready_.notify_all();
}

void RequestStream::set_listener(std::function<void()> listener) {
  std::lock_guard lock(mutex_);
  listener_ = std::move(listener);
}

namespace {

// The last event of a choice that produced no further tokens (cancelled, failed).
StreamEvent ending_event(int32_t choice, FinishReason reason, std::string error, int64_t prompt_tokens,
                         int64_t cached_tokens) {
  StreamEvent event;
  event.choice = choice;
  event.finish = reason;
  event.error = std::move(error);
  event.prompt_tokens = prompt_tokens;
  event.cached_tokens = cached_tokens;
  return event;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

struct Engine::Impl {
  struct Submission {
    RequestId id;
    GenerationRequest request;
    std::shared_ptr<RequestStream> stream;
  };
  struct Live {  // a request the loop knows about
    std::shared_ptr<RequestStream> stream;
    RequestId scheduler_id = -1;
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0;
    int32_t open_choices = 0;
  };

  Impl(const model::Model& loaded, EngineOptions chosen)
      : model(loaded), options(chosen), scheduler(configure(loaded, chosen)), executor(loaded, scheduler) {
    if (!options.confidence_log.empty() && options.speculative != SpeculativeMode::static_blocks)
      fail("--confidence-log records whole draft blocks: it needs --speculative static, not ",
           speculative_mode_name(options.speculative));
    if (options.speculative == SpeculativeMode::off) return;
    if (!model.drafter())
      fail("speculative decoding (", speculative_mode_name(options.speculative),
           ") needs a model with a DSpark drafter; this checkpoint has none");
    if (!options.confidence_log.empty())
      executor.set_confidence_log(std::make_unique<ConfidenceLog>(options.confidence_log));
    StepRateTable rates;
    if (options.speculative == SpeculativeMode::scheduled) {
      rates = profile_step_rates(model, options.max_batch_tokens, model.drafter()->block_size());
      if (options.speculation_governor) governor.emplace(options.governor_exploit_steps, options.governor_probe_steps);
    }
    executor.set_speculation(options.speculative, std::move(rates));
  }

  static SchedulerConfig configure(const model::Model& model, const EngineOptions& options) {
    SchedulerConfig config = scheduler_config(model.cache_layout(options.block_tokens), options.cache_memory_bytes,
                                              options.max_batch_tokens, static_cast<int32_t>(options.max_running));
    config.snapshot_bytes = model.max_snapshot_bytes(options.block_tokens);
    config.cache_memory = &model.backend().cache_memory();
    config.prefix_caching = options.prefix_caching;
    return config;
  }

  // Engine thread only -------------------------------------------------------------------------

  void admit(Submission& submission) {
    Live live;
    live.stream = submission.stream;
    live.prompt_tokens = static_cast<int64_t>(submission.request.prompt.size());
    live.open_choices = submission.request.sampling.n;
    RequestSpec spec;
    spec.prompt = submission.request.prompt;
    spec.max_tokens = submission.request.max_tokens;
    spec.priority = submission.request.priority;
    spec.n = submission.request.sampling.n;
    // Cached blocks would skip the forward rows that score the prompt (vLLM does the same).
    spec.prefix_match = !submission.request.sampling.prompt_logprobs.has_value();
    if (submission.request.sampling.prompt_logprobs) {
      const int64_t row_bytes = model.vocab_size() * static_cast<int64_t>(sizeof(float));
      spec.max_chunk_tokens = std::max<int64_t>(1, options.max_prompt_logits_bytes / row_bytes);
    }
    auto sampling = std::make_shared<RequestSampling>();
    sampling->params = submission.request.sampling;
    sampling->seed = submission.stream->seed();
    sampling->stop_token_ids = submission.request.sampling.stop_token_ids;
    if (!submission.request.ignore_eos)
      sampling->stop_token_ids.insert(sampling->stop_token_ids.end(), submission.request.eos_token_ids.begin(),
                                      submission.request.eos_token_ids.end());
    sampling->max_tokens = submission.request.max_tokens;
    const SamplingParams& params = submission.request.sampling;
    sampling->speculative = options.speculative != SpeculativeMode::off && !params.constraint &&
                            params.presence_penalty == 0.0f && params.frequency_penalty == 0.0f &&
                            params.repetition_penalty == 1.0f;
    sampling->exact_replay = sampling->speculative && params.seed.has_value() && !params.greedy();
    const std::optional<OutputConstraint>& constraint = submission.request.sampling.constraint;
    // A request with logprobs draws every token, so each has its own log-probability.
    sampling->jump_forward = options.jump_forward && constraint && constraint->encode &&
                             !submission.request.sampling.logprobs.has_value();
    if (sampling->speculative) spec.draft_tokens = static_cast<int32_t>(model.drafter()->block_size());
    try {
      sampling->initial_forced = initial_forced_tokens(*sampling);
      spec.forced = sampling->initial_forced;
      live.scheduler_id = scheduler.add_request(spec);
    } catch (const Error& error) {
      for (int32_t choice = 0; choice < spec.n; ++choice)
        live.stream->push(ending_event(choice, FinishReason::Error, error.what(), live.prompt_tokens, 0));
      return;
    }
    executor.add_request(live.scheduler_id, std::move(sampling), spec.prompt, spec.n);
    by_scheduler_id[live.scheduler_id] = submission.id;
    live_requests[submission.id] = std::move(live);
  }

  void close_choice(RequestId id, Live& live) {
    if (--live.open_choices > 0) return;
    executor.forget_request(live.scheduler_id);
    by_scheduler_id.erase(live.scheduler_id);
    live_requests.erase(id);
  }

  // Ends a request now: cancelled, or failed with `error`; its blocks go back at once.
  void cancel_now(RequestId id, FinishReason reason = FinishReason::Cancelled, const std::string& error = "") {
    const auto found = live_requests.find(id);
    if (found == live_requests.end()) return;
    const Live& live = found->second;
    for (SequenceId sequence : scheduler.cancel(live.scheduler_id)) {
      live.stream->push(ending_event(sequence.choice, reason, error, live.prompt_tokens, live.cached_tokens));
      executor.forget_sequence(sequence);
    }
    executor.forget_request(live.scheduler_id);
    by_scheduler_id.erase(live.scheduler_id);
    live_requests.erase(found);
  }

  // A step whose compute threw (the device out of memory, a kernel's refusal): the requests with
  // a sequence in it end with the error, since their states are partly advanced; every other
  // request, and the engine, go on.
  void fail_step(const std::string& error) {
    const StepExecutor::Abandoned abandoned = executor.abandon();
    std::set<RequestId> failed;
    for (const SequenceId& sequence : abandoned.sequences)
      if (const auto request = by_scheduler_id.find(sequence.request); request != by_scheduler_id.end())
        failed.insert(request->second);
    for (RequestId id : failed) cancel_now(id, FinishReason::Error, "the step computing this request failed: " + error);
    scheduler.on_step_finished(abandoned.step, {});  // no sequence of it is current any more
    ++failed_steps;
  }

  // Publishes one finished step: its tokens and the sequences it ended, one event per sequence.
  void finish_step() {
    const StepExecutor::Finished finished = executor.finish();
    if (governor) {
      governor->record(seconds_since(last_finish), static_cast<int64_t>(finished.tokens.size()),
                       static_cast<int64_t>(finished.results.size()));
      executor.set_drafting(governor->drafting());
    }
    last_finish = Clock::now();
    const StepOutcome outcome = scheduler.on_step_finished(finished.step, finished.results);
    ++steps;
    for (const auto& [sequence, cached] : finished.restored) {
      const auto request = by_scheduler_id.find(sequence.request);
      if (request != by_scheduler_id.end() && sequence.choice == 0) live_requests.at(request->second).cached_tokens = cached;
    }
    std::map<SequenceId, StreamEvent> events;
    for (const ScoredPrompt& scored : finished.scored_prompts) {
      StreamEvent& event = events[scored.id];
      event.choice = scored.id.choice;
      for (const SampleResult& score : scored.scores)
        event.prompt_logprobs.push_back(GeneratedToken{score.token, score.logprob, score.top_logprobs, false});
    }
    for (const ProducedToken& produced : finished.tokens) {
      StreamEvent& event = events[produced.id];
      event.choice = produced.id.choice;
      event.tokens.push_back(GeneratedToken{produced.token, produced.logprob, produced.top_logprobs, produced.forced});
      forced_tokens += produced.forced ? 1 : 0;
    }
    generated_tokens += static_cast<int64_t>(finished.tokens.size());
    for (const FinishedSequence& done : outcome.finished) {
      StreamEvent& event = events[done.id];
      event.choice = done.id.choice;
      event.finish = done.reason == SequenceEnd::stop ? FinishReason::Stop : FinishReason::Length;
    }
    for (auto& [sequence, event] : events) {
      const auto request = by_scheduler_id.find(sequence.request);
      if (request == by_scheduler_id.end()) continue;
      const RequestId id = request->second;
      Live& live = live_requests.at(id);
      event.prompt_tokens = live.prompt_tokens;
      event.cached_tokens = live.cached_tokens;
      const bool finishing = event.finish.has_value();
      live.stream->push(std::move(event));
      if (finishing) {
        executor.forget_sequence(sequence);
        close_choice(id, live);
      }
    }
  }

  void take_inbox() {
    std::vector<Submission> submissions;
    std::vector<RequestId> cancels;
    bool stop = false;
    int64_t clears = 0;
    {
      std::lock_guard lock(mutex);
      submissions.swap(inbox);
      cancels.swap(cancel_inbox);
      stop = stopping;
      clears = clear_requests;
      // stats() counts the inbox live and the scheduler's queue as last published: the requests
      // taken here count as waiting until the next publication, or a server checking max_waiting
      // in between would see them nowhere and admit one request too many.
      published.waiting += static_cast<int64_t>(submissions.size());
    }
    if (clears > 0) {
      scheduler.clear_prefix_cache();
      publish_stats();
      {
        std::lock_guard lock(mutex);
        clears_done += clears;
        clear_requests -= clears;
      }
      cleared.notify_all();
    }
    for (Submission& submission : submissions) admit(submission);
    if (stop)  // the engine is being destroyed: everything left ends as cancelled
      for (const auto& [id, live] : live_requests) cancels.push_back(id);
    for (RequestId id : cancels) cancel_now(id);
  }

  void publish_stats() {
    const SchedulerCounters counters = scheduler.counters();
    std::lock_guard lock(mutex);
    published.running = counters.running;
    published.waiting = counters.waiting;
    published.steps = steps;
    published.preemptions = counters.preemptions;
    published.failed_steps = failed_steps;
    published.generated_tokens = generated_tokens;
    published.forced_tokens = forced_tokens;
    published.prefix_queried_tokens = counters.prefix_queried_tokens;
    published.prefix_hit_tokens = counters.prefix_hit_tokens;
    published.total_blocks = counters.total_blocks;
    published.free_blocks = counters.free_blocks;
    published.cached_blocks = counters.cached_blocks;
    published.in_use_blocks = counters.in_use_blocks;
    published.snapshots = counters.snapshots;
    published.snapshot_blocks = counters.snapshot_blocks;
    published.running_state_blocks = counters.running_state_blocks;
    published.running_tokens = counters.running_tokens;
    published.block_bytes = scheduler.config().block_bytes;
    published.schedule_seconds = host_seconds;
    published.compute_seconds = compute_seconds;
    published.planning_seconds = planning_seconds;
    published.chained_steps = chained_steps;
    published.speculative = options.speculative;
    published.speculation = executor.speculation();
    if (governor) {
      published.drafting = governor->drafting();
      published.drafting_switches = governor->switches();
      published.drafting_rate = governor->rate(true);
      published.plain_rate = governor->rate(false);
    }
  }

  // While a step computes, this thread plans the next one. When that plan only continues the
  // computing step's sequences (StepExecutor::can_chain) it is issued at once, so the device goes
  // from one step to the next without waiting for the host; otherwise it is issued once the
  // computing step is published and new requests and cancellations are taken.
  void run_loop() {
    std::optional<StepPlan> plan;  // planned, not issued yet
    Clock::time_point host_start = Clock::now();  // since when no step has been issued
    while (true) {
      if (executor.in_flight() > 0) {
        if (!plan) plan = timed_schedule();
        bool chained = false;
        if (options.overlap_schedule && executor.can_chain(*plan)) {
          executor.prepare(*plan);
          executor.issue();
          plan.reset();
          chained = true;
          ++chained_steps;
        }
        const Clock::time_point wait_start = Clock::now();
        std::optional<std::string> compute_error;
        try {
          const ScopedPhase timed("engine: collect");
          executor.collect();
        } catch (const std::exception& error) {
          compute_error = error.what();
        }
        compute_seconds += seconds_since(wait_start);
        if (!chained) host_start = Clock::now();
        {
          const ScopedPhase timed("engine: finish step");
          if (compute_error) fail_step(*compute_error);
          else finish_step();
        }
        take_inbox();
        if (executor.in_flight() > 0) {
          publish_stats();
          continue;
        }
      } else {
        take_inbox();
      }
      if (!plan || plan->empty()) plan = timed_schedule();
      // Tokens the finished step forced (jump-forward) extend this plan's decodes of their sequences.
      scheduler.take_forced_tokens(*plan);
      if (plan->empty()) plan = timed_schedule();  // its only item could not grow (no spare block)
      // Drafts proposed by the finished step join this plan's decodes for verification.
      if (options.speculative != SpeculativeMode::off) {
        const ScopedPhase timed("engine: take drafts");
        scheduler.take_drafts(*plan, executor.draft_offers(*plan));
      }
      if (plan->empty()) {
        plan.reset();
        host_seconds += seconds_since(host_start);
        publish_stats();
        std::unique_lock lock(mutex);
        if (!live_requests.empty()) fail("the scheduler planned nothing for ", live_requests.size(), " live requests");
        if (stopping && inbox.empty() && cancel_inbox.empty()) return;
        idle = true;
        idle_changed.notify_all();
        wake.wait(lock, [&] { return !inbox.empty() || !cancel_inbox.empty() || clear_requests > 0 || stopping; });
        idle = false;
        lock.unlock();
        host_start = Clock::now();
        last_finish = host_start;  // idle time is not a step's
        continue;
      }
      {
        const ScopedPhase timed("engine: prepare");
        executor.prepare(*plan);
      }
      plan.reset();
      {
        const ScopedPhase timed("engine: issue");
        executor.issue();
      }
      host_seconds += seconds_since(host_start);
      publish_stats();  // behind the step: its compute never touches the scheduler
    }
  }

  StepPlan timed_schedule() {
    const Clock::time_point start = Clock::now();
    const ScopedPhase timed("engine: schedule");
    StepPlan plan = scheduler.schedule();
    planning_seconds += seconds_since(start);
    return plan;
  }

  void loop() {
    try {
      run_loop();
    } catch (const std::exception& error) {
      fail_everything(error.what());
    }
    std::lock_guard lock(mutex);
    idle = true;
    finished_loop = true;
    idle_changed.notify_all();
  }

  // An engine bug or a model error: every request ends with the error instead of hanging.
  void fail_everything(const std::string& message) {
    std::lock_guard lock(mutex);
    loop_error = message;
    for (auto& [id, live] : live_requests)
      for (int32_t choice = 0; choice < live.open_choices; ++choice)
        live.stream->push(ending_event(choice, FinishReason::Error, message, live.prompt_tokens, 0));
    live_requests.clear();
    for (Submission& submission : inbox)
      for (int32_t choice = 0; choice < submission.request.sampling.n; ++choice)
        submission.stream->push(ending_event(choice, FinishReason::Error, message, 0, 0));
    inbox.clear();
  }

  const model::Model& model;
  const EngineOptions options;
  Scheduler scheduler;
  StepExecutor executor;
  std::map<RequestId, Live> live_requests;    // engine request id -> state (engine thread)
  std::map<RequestId, RequestId> by_scheduler_id;

  // Shared with the API threads, under `mutex`.
  mutable std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable idle_changed;
  std::vector<Submission> inbox;
  std::vector<RequestId> cancel_inbox;
  int64_t clear_requests = 0;  // clear_prefix_cache() calls not served yet
  int64_t clears_done = 0;
  std::condition_variable cleared;
  bool stopping = false;
  bool accepting = true;
  bool idle = true;
  bool finished_loop = false;
  std::string loop_error;
  std::atomic<RequestId> next_id{1};

  // Engine thread only; published to stats() under `mutex` by publish_stats().
  double compute_seconds = 0;   // waiting for a step's results
  double planning_seconds = 0;
  double host_seconds = 0;  // finishing, planning and issuing while no step was issued
  int64_t chained_steps = 0;
  int64_t steps = 0;
  int64_t failed_steps = 0;
  int64_t generated_tokens = 0;
  int64_t forced_tokens = 0;
  EngineStats published;
  // Scheduled speculation: whether drafting pays, measured while serving.
  std::optional<SpeculationGovernor> governor;
  Clock::time_point last_finish = Clock::now();

  std::thread thread;
};

Engine::Engine(const model::Model& model, EngineOptions options) : impl_(std::make_unique<Impl>(model, options)) {
  impl_->thread = std::thread([this] { impl_->loop(); });
}

// Cancels everything still known (the requests' streams get their Cancelled events), then the
// loop sees no live request and returns.
Engine::~Engine() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
    impl_->accepting = false;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

std::shared_ptr<RequestStream> Engine::submit(GenerationRequest request) {
  if (request.prompt.empty()) fail("the prompt is empty");
  validate(request.sampling, impl_->model.vocab_size());
  for (int32_t id : request.prompt)
    if (id < 0 || id >= impl_->model.vocab_size())
      fail("prompt token ", id, " is outside the vocabulary of ", impl_->model.vocab_size());
  for (int32_t id : request.eos_token_ids)
    if (id < 0 || id >= impl_->model.vocab_size()) fail("eos token ", id, " is outside the vocabulary");
  if (request.max_tokens < 1) fail("max_tokens must be at least 1, got ", request.max_tokens);
  const RequestId id = impl_->next_id.fetch_add(1);
  const uint64_t seed = request.sampling.seed ? *request.sampling.seed
                        : impl_->options.seed ? seed_for_request(*impl_->options.seed, static_cast<uint64_t>(id))
                                              : draw_engine_seed();
  auto stream = std::make_shared<RequestStream>(id, seed, request.sampling.n);
  {
    std::lock_guard lock(impl_->mutex);
    if (!impl_->accepting) fail("the engine is shutting down");
    if (!impl_->loop_error.empty()) fail("the engine stopped after an error: ", impl_->loop_error);
    if (static_cast<int64_t>(impl_->inbox.size()) >= impl_->options.max_waiting)
      fail("the engine's queue is full (", impl_->options.max_waiting, " requests waiting)");
    impl_->inbox.push_back(Impl::Submission{id, std::move(request), stream});
  }
  impl_->wake.notify_all();
  return stream;
}

void Engine::cancel(RequestId id) {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->cancel_inbox.push_back(id);
  }
  impl_->wake.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->mutex);
  EngineStats out = impl_->published;
  out.waiting += static_cast<int64_t>(impl_->inbox.size());
  return out;
}

void Engine::clear_prefix_cache() {
  std::unique_lock lock(impl_->mutex);
  const int64_t target = impl_->clears_done + impl_->clear_requests + 1;
  ++impl_->clear_requests;
  impl_->wake.notify_all();
  impl_->cleared.wait(lock, [&] { return impl_->clears_done >= target || impl_->finished_loop; });
}

void Engine::drain() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->accepting = false;
  }
  std::unique_lock lock(impl_->mutex);
  impl_->idle_changed.wait(lock, [&] { return impl_->finished_loop || (impl_->idle && impl_->inbox.empty()); });
}

}  // namespace deepinfer::engine

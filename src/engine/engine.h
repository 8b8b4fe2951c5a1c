#pragma once
// The serving engine's public face, used by the server and the CLI: submit a request, read its
// tokens as they are produced, cancel it, read counters. Behind it one engine thread runs the
// step loop (scheduler.h plans, Model::forward_batch computes, sampler.h picks); docs/ENGINE.md
// has the picture.
//
// Thread safety: every member may be called from any thread. A RequestStream is read by one
// consumer.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/speculation.h"

namespace deepinfer::model {
class Model;
}

namespace deepinfer::engine {

using RequestId = int64_t;

struct EngineOptions {
  int64_t cache_memory_bytes = int64_t{1} << 30;  // --cache-memory: blocks, snapshots, running state
  int64_t block_tokens = 64;                      // tokens per cache block
  int64_t max_batch_tokens = 512;                 // token budget of one step (decodes + prefill chunks)
  int64_t max_running = 256;                      // sequences in one step at most
  int64_t max_waiting = 4096;                     // submit() refuses beyond this (the server's 429)
  bool prefix_caching = true;
  // A prompt_logprobs request keeps every row's logits of its chunk (rows x vocab floats): its
  // chunks are cut so that buffer stays within this (at least one row).
  int64_t max_prompt_logits_bytes = int64_t{64} << 20;
  // Jump-forward (--no-jump-forward turns it off): where a constrained request's grammar forces
  // the next bytes, their tokens are appended without a draw and computed in the next step with
  // the drawn token, like a chunk of a prefill, instead of one step each. Requests that ask for
  // logprobs never jump (every token they get has its own log-probability).
  bool jump_forward = true;
  // Overlap scheduling (--disable-overlap-schedule turns it off, as in SGLang): on a backend that
  // chains passes (Model::chains_draws), a step that only continues the computing step's
  // sequences is issued before that step's tokens reach the host (StepExecutor::can_chain).
  bool overlap_schedule = true;
  // Speculative decoding with the model's DSpark drafter (--speculative; docs/ENGINE.md): off,
  // static blocks, or confidence-scheduled verification (profiles the step costs at start, and
  // drafts only while drafting measures faster than not: SpeculationGovernor).
  // Requests with a grammar or repetition / frequency / presence penalties decode one token per
  // step. Needs a model with a drafter (the constructor throws otherwise).
  SpeculativeMode speculative = SpeculativeMode::off;
  // Scheduled mode's governor (SpeculationGovernor): its first exploit phase and its probes, steps.
  int64_t governor_exploit_steps = 64;
  int64_t governor_probe_steps = 8;
  // --no-speculation-governor: scheduled mode drafts at every step, even at loads where drafting
  // measures slower (what the verification schedule alone does, for benchmarks).
  bool speculation_governor = true;
  // --confidence-log FILE: every verification of a whole draft block appended to FILE (the
  // confidence head's raw outputs and the drafts kept: engine/confidence_log.h), the data
  // `deepinfer calibrate-confidence` fits the head's temperatures on. Static mode only: scheduled
  // verification trims blocks by their confidences, which would bias the record.
  std::string confidence_log;
  // --seed N (vLLM's --seed): a request without a seed of its own gets seed_for_request(N, its
  // id) instead of a fresh one from std::random_device, so a run that submits the same requests in
  // the same order draws the same tokens. Such a request still counts as unseeded: under
  // speculative decoding it is verified by speculative sampling, not replayed exactly
  // (RequestSampling::exact_replay).
  std::optional<uint64_t> seed;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;  // validate()d by submit; n choices share the prompt's cache
  int64_t max_tokens = 256;
  int32_t priority = 0;     // lower runs first; FCFS among equals
  std::vector<int32_t> eos_token_ids;  // finish with reason Stop unless ignore_eos
  bool ignore_eos = false;
};

enum class FinishReason { Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason reason);

struct GeneratedToken {
  int32_t token = -1;
  float logprob = 0;                      // raw log-probability (when sampling.logprobs is set)
  std::vector<TokenLogprob> top_logprobs;  // best first
  bool forced = false;  // appended by jump-forward (EngineOptions::jump_forward), not drawn
};

// One event of one choice: tokens produced since the last event and, on the last one, why it
// ended. prompt_tokens / cached_tokens are set on every event (cached = served from the prefix cache).
// With sampling.prompt_logprobs, `prompt_logprobs` carries the next prompt tokens scored (token =
// the prompt's id, its raw log-probability, top alternatives), in prompt order from prompt token 1
// (token 0 has none), each exactly once per request, all before the request's first generated
// token; `tokens` of the same event come after them.
struct StreamEvent {
  int32_t choice = 0;
  std::vector<GeneratedToken> tokens;
  std::optional<FinishReason> finish;
  std::string error;  // FinishReason::Error only
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  std::vector<GeneratedToken> prompt_logprobs;
};

// A request's output, in order. Every choice ends with exactly one event carrying `finish`.
class RequestStream {
 public:
  RequestId id() const { return id_; }
  uint64_t seed() const { return seed_; }  // the request's seed, drawn by the engine if none was given
  int32_t choices() const { return choices_; }

  // The next event; blocks until one arrives, or until `timeout` passes (then nullopt).
  std::optional<StreamEvent> next(std::chrono::milliseconds timeout = std::chrono::milliseconds::max());
  // True once every choice has delivered its finishing event and the consumer has read it.
  bool done() const;
  // Called after each event is pushed (on the engine's thread, under the stream's lock: it must
  // only signal, e.g. post to an event loop). Replaces the previous listener; an empty function
  // removes it, and once set_listener returns the old one is no longer running or called. For
  // consumers that wait on an event loop instead of blocking in next().
  void set_listener(std::function<void()> listener);

  // Engine side.
  RequestStream(RequestId id, uint64_t seed, int32_t choices) : id_(id), seed_(seed), choices_(choices) {}
  void push(StreamEvent event);

 private:
  const RequestId id_;
  const uint64_t seed_;
  const int32_t choices_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
  int32_t finished_read_ = 0;
  std::function<void()> listener_;
};

struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t failed_steps = 0;       // steps whose compute threw (their requests ended with the error)
  int64_t prompt_tokens = 0;      // computed or served from cache
  int64_t generated_tokens = 0;
  int64_t forced_tokens = 0;      // of generated_tokens, appended by jump-forward without a draw
  int64_t prefix_queried_tokens = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;
  int64_t in_use_blocks = 0;      // referenced by a running sequence (or a snapshot)
  int64_t cached_blocks = 0;      // held by the prefix cache (evictable or in use)
  int64_t snapshots = 0;
  int64_t snapshot_blocks = 0;       // of in_use_blocks, those holding snapshots
  int64_t running_state_blocks = 0;  // of in_use_blocks, those reserved for running sequences' fixed state
  int64_t running_tokens = 0;        // tokens whose cache state running sequences hold
  int64_t block_bytes = 0;
  // Wall time of the engine thread: schedule_seconds is host work (finishing a step, taking
  // requests, planning, issuing) while no step was issued, time the device waits for the host;
  // compute_seconds is waiting for a step's results. planning_seconds is all time in
  // Scheduler::schedule(), most of it overlapped with a computing step.
  double schedule_seconds = 0;
  double compute_seconds = 0;
  double planning_seconds = 0;
  int64_t chained_steps = 0;  // issued while the step before them computed (overlap_schedule)
  SpeculativeMode speculative = SpeculativeMode::off;
  SpeculationCounters speculation;
  // Scheduled mode's governor: drafting now, mode changes, the tokens/s it last measured with and
  // without drafting.
  bool drafting = false;
  int64_t drafting_switches = 0;
  double drafting_rate = 0;
  double plain_rate = 0;
};

class Engine {
 public:
  // Starts the engine thread. Throws deepinfer::Error when the options cannot hold one sequence.
  Engine(const model::Model& model, EngineOptions options);
  ~Engine();  // cancels what is left and joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Throws deepinfer::Error on an invalid request (bad sampling parameters, empty prompt, token
  // outside the vocabulary, prompt + max_tokens beyond what the cache can ever hold, queue full).
  std::shared_ptr<RequestStream> submit(GenerationRequest request);
  // Ends the request wherever it is (waiting, prefilling, decoding); its choices finish with
  // FinishReason::Cancelled and its blocks go back. Unknown or finished ids are ignored.
  void cancel(RequestId id);
  EngineStats stats() const;
  // Evicts every cached prefix block no request is using, and their snapshots (vLLM's
  // reset_prefix_cache). Returns once done.
  void clear_prefix_cache();
  // Stops taking requests and returns when every running and waiting request has finished.
  void drain();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::engine

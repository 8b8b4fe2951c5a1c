#pragma once
// One request in the engine, as the HTTP handlers see it: checked limits, submission (with the
// status a refusal deserves), the engine's events with their timing, cancellation when the
// handler leaves early (client gone, stop string matched, exception), and the decoding of each
// choice's tokens into the API layer's events.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/output_events.h"
#include "api/output_processor.h"
#include "api/output_token_pieces.h"
#include "engine/engine.h"
#include "server/metrics.h"
#include "server/served_model.h"

namespace deepinfer::server {

using Clock = std::chrono::steady_clock;

// max_tokens for a prompt of `prompt_tokens`: the request's value, or the operator's default
// (--default-max-tokens) within what is left of the context, or what is left of the context.
// 400 (context_length_exceeded) when the prompt alone or prompt + max_tokens exceed the context.
int64_t resolve_max_tokens(std::optional<int64_t> requested, int64_t prompt_tokens, int64_t context_length,
                           std::optional<int64_t> default_max_tokens = std::nullopt);

// 400 "token outside the model's vocabulary" unless every id is in [0, vocab).
void check_prompt_vocabulary(const std::vector<int32_t>& prompt, int64_t vocab_size);

class Generation {
 public:
  // Submits; throws api::ApiError: 429 when the engine's queue is full, 400 for anything the
  // engine refuses. `arrival` is when the HTTP request came in (for the latency metrics).
  Generation(ServedModel& model, engine::GenerationRequest request, Clock::time_point arrival);
  ~Generation();  // cancels the request unless every choice has finished
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // The next event, or nullopt once every choice has finished or `timeout` passed (see finished()).
  std::optional<engine::StreamEvent> next(std::chrono::milliseconds timeout);
  // The next event if one is there; never blocks.
  std::optional<engine::StreamEvent> poll() { return next(std::chrono::milliseconds(0)); }
  // `wakeup` runs (on the engine's thread: it must only signal) whenever an event arrives.
  void set_wakeup(std::function<void()> wakeup);
  bool finished() const { return finished_choices_ == choices_; }
  // Ends the request early; its cache blocks go back.
  void cancel();

  engine::RequestId id() const { return stream_->id(); }
  uint64_t seed() const { return stream_->seed(); }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t generated_tokens() const { return generated_tokens_; }
  // Timing and token counts for the metrics and the request log.
  RequestRecord record(std::string endpoint, int status) const;

 private:
  engine::Engine& engine_;
  InFlightRequests& in_flight_;
  std::shared_ptr<engine::RequestStream> stream_;
  Clock::time_point arrival_;
  std::optional<Clock::time_point> first_token_;
  Clock::time_point last_token_;
  int32_t choices_ = 1;
  int32_t finished_choices_ = 0;
  bool cancelled_ = false;
  int64_t prompt_tokens_ = 0;
  int64_t cached_tokens_ = 0;
  int64_t generated_tokens_ = 0;
};

struct ChoiceOutputOptions {
  // Attach each answer token's log-probability to the content_delta that carries its text
  // (reasoning and tool-call tokens have none: Chat Completions reports content tokens only).
  bool logprobs = false;
  // The request runs past EOS: an EOS id is then a generated token (counted, no text).
  bool ignore_eos = false;
};

// Decodes one choice of a chat-style answer (Chat Completions, Messages): token ids -> text pieces
// -> OutputProcessor events. EOS ids end the answer without text.
class ChoiceOutput {
 public:
  ChoiceOutput(const ServedModel& model, api::OutputParsingOptions parsing, ChoiceOutputOptions options = {});
  // The events one engine event of this choice becomes. The first call also starts the answer
  // with the prompt usage. Throws api::ApiError (500) when the engine failed the request.
  std::vector<api::StreamEvent> add(const engine::StreamEvent& event);
  // The answer is complete (finished, or a stop string matched: then cancel the request).
  bool done() const { return processor_.done(); }

 private:
  const ServedModel& model_;
  api::OutputProcessor processor_;
  api::TokenPieceDecoder pieces_;
  ChoiceOutputOptions options_;
  std::vector<api::TokenLogprob> pending_logprobs_;  // content tokens whose text has not come out yet
  bool started_ = false;

  api::TokenLogprob token_logprob(const engine::GeneratedToken& token) const;
};

}  // namespace deepinfer::server

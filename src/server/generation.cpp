#include "server/generation.h"

#include <algorithm>
#include <climits>
#include <span>
#include <utility>
#include <variant>

#include "api/api_error.h"
#include "core/error.h"

namespace deepinfer::server {

int64_t resolve_max_tokens(std::optional<int64_t> requested, int64_t prompt_tokens, int64_t context_length,
                           std::optional<int64_t> default_max_tokens) {
  if (prompt_tokens >= context_length)
    throw api::ApiError(400,
                        "This model's maximum context length is " + std::to_string(context_length) +
                            " tokens. However, your prompt has " + std::to_string(prompt_tokens) +
                            " tokens. Please reduce the length of the prompt.",
                        "messages", "invalid_request_error", "context_length_exceeded");
  if (!requested) return std::min(context_length - prompt_tokens, default_max_tokens.value_or(INT64_MAX));
  if (*requested < 1) throw api::ApiError(400, "max_tokens must be greater than zero", "max_tokens");
  if (*requested > context_length - prompt_tokens)
    throw api::ApiError(400,
                        "This model's maximum context length is " + std::to_string(context_length) +
                            " tokens. However, you requested " + std::to_string(prompt_tokens + *requested) +
                            " tokens (" + std::to_string(prompt_tokens) + " in the prompt, " +
                            std::to_string(*requested) +
                            " in the completion). Please reduce the length of the prompt or completion.",
                        "max_tokens", "invalid_request_error", "context_length_exceeded");
  return *requested;
}

void check_prompt_vocabulary(const std::vector<int32_t>& prompt, int64_t vocab_size) {
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab_size)
      throw api::ApiError(400, "prompt token " + std::to_string(prompt[i]) + " (position " + std::to_string(i) +
                                   ") is a token outside the model's vocabulary (" + std::to_string(vocab_size) +
                                   " ids)",
                          "prompt");
}

Generation::Generation(ServedModel& model, engine::GenerationRequest request, Clock::time_point arrival)
    : engine_(model.engine()), in_flight_(model.in_flight()), arrival_(arrival), last_token_(arrival),
      choices_(request.sampling.n) {
  check_prompt_vocabulary(request.prompt, model.model().vocab_size());
  prompt_tokens_ = static_cast<int64_t>(request.prompt.size());
  // The engine bounds only its inbox; the server bounds everything not yet running.
  const int64_t max_waiting = model.engine_options().max_waiting;
  auto overloaded = [max_waiting](const std::string& detail) {
    return api::ApiError(429, "The server is overloaded: " + detail + " (" + std::to_string(max_waiting) +
                                  " requests waiting); retry later",
                         "", "rate_limit_error", "rate_limit_exceeded");
  };
  if (engine_.stats().waiting >= max_waiting) throw overloaded("the queue is full");
  try {
    stream_ = engine_.submit(std::move(request));
  } catch (const Error& error) {
    // The engine refuses a full queue with the same exception type as a bad request; its
    // counters tell the two apart.
    if (engine_.stats().waiting >= max_waiting) throw overloaded(error.what());
    throw api::ApiError(400, error.what());
  }
  in_flight_.add(stream_->id());
}

Generation::~Generation() {
  stream_->set_listener(nullptr);
  if (!finished()) cancel();
  in_flight_.remove(stream_->id());
}

void Generation::set_wakeup(std::function<void()> wakeup) { stream_->set_listener(std::move(wakeup)); }

void Generation::cancel() {
  if (cancelled_) return;
  cancelled_ = true;
  engine_.cancel(stream_->id());
}

std::optional<engine::StreamEvent> Generation::next(std::chrono::milliseconds timeout) {
  if (finished()) return std::nullopt;
  std::optional<engine::StreamEvent> event = stream_->next(timeout);
  if (!event) return event;
  const Clock::time_point now = Clock::now();
  prompt_tokens_ = std::max(prompt_tokens_, event->prompt_tokens);
  cached_tokens_ = std::max(cached_tokens_, event->cached_tokens);
  if (!event->tokens.empty()) {
    if (!first_token_) first_token_ = now;
    last_token_ = now;
    generated_tokens_ += static_cast<int64_t>(event->tokens.size());
  }
  if (event->finish) ++finished_choices_;
  return event;
}

RequestRecord Generation::record(std::string endpoint, int status) const {
  using Seconds = std::chrono::duration<double>;
  RequestRecord record;
  record.endpoint = std::move(endpoint);
  record.status = status;
  record.prompt_tokens = prompt_tokens_;
  record.completion_tokens = generated_tokens_;
  record.latency = Seconds(Clock::now() - arrival_).count();
  if (first_token_) {
    record.time_to_first_token = Seconds(*first_token_ - arrival_).count();
    if (generated_tokens_ > 1)
      record.time_per_output_token =
          Seconds(last_token_ - *first_token_).count() / static_cast<double>(generated_tokens_ - 1);
  }
  return record;
}

ChoiceOutput::ChoiceOutput(const ServedModel& model, api::OutputParsingOptions parsing, ChoiceOutputOptions options)
    : model_(model), processor_(std::move(parsing)), pieces_(model.tokenizer()), options_(options) {}

api::TokenLogprob ChoiceOutput::token_logprob(const engine::GeneratedToken& token) const {
  const Tokenizer& tokenizer = model_.tokenizer();
  const auto tokenizer_vocab = static_cast<int32_t>(tokenizer.vocab_size());
  // An id past the tokenizer's vocabulary has no text: it is reported with empty bytes.
  auto text_of = [&](int32_t id, std::string& text, std::string& bytes) {
    if (id < 0 || id >= tokenizer_vocab) return;
    text = tokenizer.decode(std::span(&id, 1));
    bytes = tokenizer.token_bytes(id);
  };
  api::TokenLogprob out;
  out.logprob = token.logprob;
  text_of(token.token, out.token, out.bytes);
  for (const engine::TokenLogprob& alternative : token.top_logprobs) {
    api::LogprobAlternative entry;
    entry.logprob = alternative.logprob;
    text_of(alternative.token, entry.token, entry.bytes);
    out.top_logprobs.push_back(std::move(entry));
  }
  return out;
}

std::vector<api::StreamEvent> ChoiceOutput::add(const engine::StreamEvent& event) {
  std::vector<api::StreamEvent> out;
  // Content tokens go out with the first content_delta after them.
  auto append = [this, &out](std::vector<api::StreamEvent> events) {
    for (auto& e : events) {
      if (auto* output = std::get_if<api::OutputEvent>(&e);
          output && output->kind == api::OutputEvent::Kind::content_delta && !pending_logprobs_.empty())
        output->logprobs = std::exchange(pending_logprobs_, {});
      out.push_back(std::move(e));
    }
  };
  if (processor_.done()) return out;
  if (!started_) {
    started_ = true;
    append(processor_.ready({"fp_deepinfer", event.prompt_tokens, event.cached_tokens}));
  }
  const auto& eos = model_.eos_token_ids();
  const auto tokenizer_vocab = static_cast<int32_t>(model_.tokenizer().vocab_size());
  for (const engine::GeneratedToken& token : event.tokens) {
    if (processor_.done()) break;
    const bool is_eos = std::find(eos.begin(), eos.end(), token.token) != eos.end();
    if (is_eos && !options_.ignore_eos) continue;
    if (options_.logprobs && !processor_.in_reasoning()) pending_logprobs_.push_back(token_logprob(token));
    if (is_eos || token.token >= tokenizer_vocab) {
      // EOS under ignore_eos, or an id the model has but the tokenizer does not (the tokenizer
      // stops short of the model's vocabulary): no text, but it was generated.
      append(processor_.text("", 1));
      continue;
    }
    if (auto piece = pieces_.push(token.token)) append(processor_.text(piece->text, piece->tokens));
  }
  if (event.finish && !processor_.done()) {
    switch (*event.finish) {
      case engine::FinishReason::Stop: append(processor_.finish(api::BackendFinish::stop)); break;
      case engine::FinishReason::Length: append(processor_.finish(api::BackendFinish::length)); break;
      case engine::FinishReason::Cancelled: append(processor_.end_of_stream()); break;
      case engine::FinishReason::Error:
        throw api::ApiError(500, "generation failed: " + event.error, "", "internal_error", "internal_error");
    }
  }
  return out;
}

}  // namespace deepinfer::server

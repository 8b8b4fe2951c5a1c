// POST /v1/completions: the model's raw text (no chat parsing), one choice per n, with stop
// strings, legacy logprobs (tokens, token_logprobs, top_logprobs, text_offset) and echo. With
// echo and logprobs the prompt's tokens come first in logprobs (the first one's logprob and
// top_logprobs are null, as OpenAI and vLLM answer), scored by the engine (prompt_logprobs).
#include <algorithm>
#include <memory>
#include <utility>

#include "api/chunk_chat_completions.h"
#include "api/constraint_warnings.h"
#include "api/sse_format.h"
#include "server/chat_style_response.h"
#include "server/completions_request.h"
#include "server/handlers.h"
#include "server/http_io.h"
#include "server/stop_string_filter.h"

namespace deepinfer::server {
namespace {

using api::WireJson;

// One choice's text as it is produced.
class CompletionChoice {
 public:
  CompletionChoice(const ServedModel& model, const CompletionsRequest& request)
      : model_(model), detokenizer_(model.tokenizer()), stops_(request.options.stop),
        logprobs_(request.options.sampling.logprobs.has_value()), ignore_eos_(request.options.ignore_eos),
        echo_only_(request.echo_only) {
    if (request.echo) pending_text_ = request.prompt_text;
    offset_ = static_cast<int64_t>(pending_text_.size());
    if (request.echo && logprobs_) {
      prompt_text_bytes_ = offset_;
      prompt_ = request.prompt;
      add_prompt_entry(prompt_[0], nullptr, nullptr);
    }
  }

  // Prompt tokens 1.. as the engine scores them (each once, in order, before generated tokens).
  void add_prompt(const std::vector<engine::GeneratedToken>& scored) {
    if (prompt_.empty()) return;
    for (const engine::GeneratedToken& token : scored) add_prompt_entry(token.token, token.logprob, top_of(token));
  }

  // Takes one engine event; returns true when this choice has something to show.
  void add(const engine::StreamEvent& event) {
    if (finish_reason_) return;
    const auto& eos = model_.eos_token_ids();
    const auto tokenizer_vocab = static_cast<int32_t>(model_.tokenizer().vocab_size());
    for (const engine::GeneratedToken& token : event.tokens) {
      if (stops_.stopped() || echo_only_) break;
      const bool is_eos = std::find(eos.begin(), eos.end(), token.token) != eos.end();
      if (is_eos && !ignore_eos_) continue;
      ++completion_tokens_;
      // EOS under ignore_eos counts as generated but, like an id without text, shows nothing.
      const bool known = !is_eos && token.token < tokenizer_vocab;
      if (known) pending_text_ += stops_.push(detokenizer_.push(token.token));
      if (logprobs_) {
        const std::string piece = known ? model_.tokenizer().decode(std::span(&token.token, 1)) : std::string();
        tokens_.push_back(piece);
        token_logprobs_.push_back(token.logprob);
        top_logprobs_.push_back(top_of(token));
        text_offsets_.push_back(offset_);
        offset_ += static_cast<int64_t>(piece.size());
      }
    }
    if (stops_.stopped()) {
      finish_reason_ = "stop";
    } else if (event.finish) {
      if (*event.finish == engine::FinishReason::Error)
        throw api::ApiError(500, "generation failed: " + event.error, "", "internal_error", "internal_error");
      if (!echo_only_) {
        pending_text_ += stops_.push(detokenizer_.finish());
        pending_text_ += stops_.finish();
      }
      // max_tokens 0 ends at its length limit, whatever the one token the engine drew.
      finish_reason_ = echo_only_ || *event.finish == engine::FinishReason::Length ? "length" : "stop";
    }
  }

  bool done() const { return finish_reason_.has_value(); }
  bool has_news() const { return !pending_text_.empty() || !tokens_.empty() || (finish_reason_ && !reported_finish_); }
  int64_t completion_tokens() const { return completion_tokens_; }

  // The choice object with what arrived since the last call (streaming), or all of it.
  WireJson take(int index) {
    WireJson logprobs = nullptr;
    if (logprobs_)
      logprobs = {{"tokens", tokens_}, {"token_logprobs", token_logprobs_}, {"top_logprobs", top_logprobs_},
                  {"text_offset", text_offsets_}};
    WireJson finish = nullptr;
    if (finish_reason_) {
      finish = *finish_reason_;
      reported_finish_ = true;
    }
    WireJson choice = {{"text", std::exchange(pending_text_, {})}, {"index", index}, {"logprobs", logprobs},
                       {"finish_reason", finish}};
    tokens_.clear();
    token_logprobs_.clear();
    top_logprobs_.clear();
    text_offsets_.clear();
    return choice;
  }

 private:
  WireJson top_of(const engine::GeneratedToken& token) const {
    const auto tokenizer_vocab = static_cast<int32_t>(model_.tokenizer().vocab_size());
    WireJson top = WireJson::object();
    for (const engine::TokenLogprob& alternative : token.top_logprobs)
      if (alternative.token < tokenizer_vocab)
        top[model_.tokenizer().decode(std::span(&alternative.token, 1))] = alternative.logprob;
    return top;
  }

  // text_offset of a prompt token: the bytes of the `tokens` entries before it (as for generated
  // tokens, and vLLM). A BOS the server put before a string prompt is not in the echoed text and
  // takes no bytes; the clamp keeps the offsets below the generated ones where a character split
  // across tokens makes the entries longer than the text.
  void add_prompt_entry(int32_t id, WireJson logprob, WireJson top) {
    const Tokenizer& tokenizer = model_.tokenizer();
    const bool known = id < static_cast<int32_t>(tokenizer.vocab_size());
    const std::string piece = known ? tokenizer.decode(std::span(&id, 1)) : std::string();
    const bool inserted_bos = tokens_.empty() && id == tokenizer.bos_id() && !pending_text_.starts_with(piece);
    tokens_.push_back(piece);
    token_logprobs_.push_back(std::move(logprob));
    top_logprobs_.push_back(std::move(top));
    text_offsets_.push_back(std::min(prompt_offset_, prompt_text_bytes_));
    if (!inserted_bos) prompt_offset_ += static_cast<int64_t>(piece.size());
  }

  const ServedModel& model_;
  IncrementalDetokenizer detokenizer_;
  StopStringFilter stops_;
  bool logprobs_;
  bool ignore_eos_;
  bool echo_only_;
  std::vector<int32_t> prompt_;  // echo with logprobs only
  int64_t prompt_text_bytes_ = 0;
  int64_t prompt_offset_ = 0;
  std::string pending_text_;
  int64_t offset_ = 0;
  int64_t completion_tokens_ = 0;
  std::vector<std::string> tokens_;
  std::vector<WireJson> token_logprobs_;  // null for the prompt's first token
  std::vector<WireJson> top_logprobs_;
  std::vector<int64_t> text_offsets_;
  std::optional<std::string> finish_reason_;
  bool reported_finish_ = false;
};

struct CompletionJob {
  std::string id;
  std::string model;
  int64_t created = 0;
  bool include_usage = false;
  WireJson warnings = WireJson::array();  // api/constraint_warnings.h
  std::shared_ptr<Generation> generation;
  std::vector<CompletionChoice> choices;

  WireJson envelope(WireJson choices_json) const {
    return {{"id", id},           {"object", "text_completion"}, {"created", created},
            {"model", model},     {"system_fingerprint", "fp_deepinfer"}, {"choices", std::move(choices_json)}};
  }
  WireJson usage() const {
    api::CompletionUsage completion;
    for (const auto& choice : choices) completion.completion_tokens += choice.completion_tokens();
    return api::chat_usage({std::nullopt, generation->prompt_tokens(), generation->cached_tokens()}, completion,
                           /*reasoning_tokens=*/false);
  }
  bool all_done() const {
    return std::all_of(choices.begin(), choices.end(), [](const auto& c) { return c.done(); });
  }
  // Feeds one engine event; ends the request in the engine once every choice has its answer.
  void add(const engine::StreamEvent& event) {
    // Every choice echoes the prompt; the engine scores it once, on whichever choice computed it.
    if (!event.prompt_logprobs.empty())
      for (auto& choice : choices) choice.add_prompt(event.prompt_logprobs);
    choices.at(static_cast<std::size_t>(event.choice)).add(event);
    if (all_done()) generation->cancel();
  }
  RequestRecord record(int status = 200) const {
    RequestRecord r = generation->record("/v1/completions", status);
    r.completion_tokens = 0;
    for (const auto& choice : choices) r.completion_tokens += choice.completion_tokens();
    return r;
  }
};

// The answer the connection drives (http_message.h): SSE chunks, or the whole body when done.
class CompletionsProducer final : public ResponseProducer {
 public:
  CompletionsProducer(const HandlerContext& context, std::shared_ptr<CompletionJob> job, bool stream, std::string path)
      : context_(context), job_(std::move(job)), stream_(stream), path_(std::move(path)) {}
  ~CompletionsProducer() override { abandon(); }

  bool streaming() const override { return stream_; }
  void set_wakeup(std::function<void()> wakeup) override { job_->generation->set_wakeup(std::move(wakeup)); }

  bool pump(std::string& out, HttpResponse& response) override {
    if (reported_) return true;
    Generation& generation = *job_->generation;
    if (!stream_) {
      try {
        while (auto event = generation.poll()) job_->add(*event);
      } catch (const api::ApiError& error) {
        send_error(path_, response, error);
        return finish(error.status(), false);
      }
      if (!generation.finished()) return false;
      WireJson choices = WireJson::array();
      for (std::size_t k = 0; k < job_->choices.size(); ++k)
        choices.push_back(job_->choices[k].take(static_cast<int>(k)));
      WireJson body = job_->envelope(std::move(choices));
      body["usage"] = job_->usage();
      api::add_warnings(body, job_->warnings);
      send_json(response, body);
      return finish(200, false);
    }
    try {
      for (int taken = 0; taken < 64 && !generation.finished(); ++taken) {
        auto event = generation.poll();
        if (!event) return false;
        job_->add(*event);
        auto& choice = job_->choices.at(static_cast<std::size_t>(event->choice));
        if (!choice.has_news()) continue;
        WireJson chunk = job_->envelope(WireJson::array({choice.take(event->choice)}));
        if (!std::exchange(warned_, true)) api::add_warnings(chunk, job_->warnings);
        out += api::sse_data(chunk);
      }
      if (!generation.finished()) return false;
      if (job_->include_usage) {
        WireJson last = job_->envelope(WireJson::array());
        last["usage"] = job_->usage();
        out += api::sse_data(last);
      }
      out += api::sse_done();
    } catch (const api::ApiError& error) {
      out += "data: " + error_body(error) + "\n\n";
    }
    return finish(200, false);
  }

  void abandon() override {
    if (!reported_) finish(kClientClosedRequest, true);
  }

 private:
  bool finish(int status, bool client_left) {
    if (!job_->generation->finished()) job_->generation->cancel();
    reported_ = true;
    context_.report(job_->id, job_->record(status), job_->generation->cached_tokens(), client_left);
    return true;
  }

  HandlerContext context_;
  std::shared_ptr<CompletionJob> job_;
  bool stream_;
  std::string path_;
  bool warned_ = false;  // the first chunk has carried the warnings
  bool reported_ = false;
};

}  // namespace

void handle_completions(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                        Clock::time_point arrival) {
  CompletionsRequest parsed = parse_completions_request(parse_json_body(request), context.model.tokenizer());
  check_model_name(parsed.options.model, context.model.name());
  engine::GenerationRequest generation_request =
      make_generation_request(context.model, parsed.prompt, parsed.options);

  auto job = std::make_shared<CompletionJob>();
  job->id = make_response_id("cmpl-");
  job->model = context.model.name();
  job->created = unix_seconds();
  job->include_usage = parsed.options.include_usage;
  job->warnings = api::constraint_warnings(generation_request.sampling.constraint);
  for (int32_t k = 0; k < parsed.options.sampling.n; ++k) job->choices.emplace_back(context.model, parsed);
  job->generation = std::make_shared<Generation>(context.model, std::move(generation_request), arrival);

  response.producer = std::make_shared<CompletionsProducer>(context, job, parsed.options.stream, request.path);
}

}  // namespace deepinfer::server

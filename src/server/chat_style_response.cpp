#include "server/chat_style_response.h"

#include <memory>

#include "api/tool_call_constraint.h"
#include "server/http_io.h"

namespace deepinfer::server {
namespace {

api::OutputParsingOptions chat_parsing_options(const api::ApiRequest& request, const api::RenderedPrompt& prompt,
                                               bool parse_tools_whenever_given) {
  const api::Conversation& conversation = request.conversation;
  api::OutputParsingOptions parsing;
  parsing.parse_tool_calls = !conversation.tools.empty() &&
                             (parse_tools_whenever_given || conversation.tool_choice != api::ToolChoice::None);
  parsing.start_in_tool_calls = prompt.output_start == api::OutputStart::ToolCalls;
  parsing.json_output = conversation.response_format == api::ResponseFormat::JsonObject;
  parsing.thinking = prompt.output_start == api::OutputStart::Thinking;
  parsing.stop_sequences = request.options.stop;
  return parsing;
}

}  // namespace

std::vector<int32_t> encode_conversation(const ServedModel& model, const api::Conversation& conversation) {
  return model.encoder().encode(api::render_prompt(conversation, model.format()));
}

ChatStyleJob chat_style_job(const HandlerContext& context, const api::ApiRequest& parsed, std::string endpoint,
                            std::string id, bool parse_tools_whenever_given) {
  check_model_name(parsed.options.model, context.model.name());
  const api::RenderedPrompt prompt = api::render_prompt(parsed.conversation, context.model.format());
  ChatStyleJob job;
  job.endpoint = std::move(endpoint);
  job.id = std::move(id);
  api::GenerationOptions options = parsed.options;
  options.constraint =
      api::tool_call_constraint(parsed.conversation, prompt, context.model.format(), std::move(options.constraint));
  job.request = make_generation_request(context.model, context.model.encoder().encode(prompt), options,
                                        prompt.output_start == api::OutputStart::Thinking);
  job.warnings = api::constraint_warnings(job.request.sampling.constraint);
  job.parsing = chat_parsing_options(parsed, prompt, parse_tools_whenever_given);
  job.stream = parsed.options.stream;
  return job;
}

engine::GenerationRequest make_generation_request(const ServedModel& model, std::vector<int32_t> prompt,
                                                  const api::GenerationOptions& options, bool thinking) {
  check_prompt_vocabulary(prompt, model.model().vocab_size());
  engine::GenerationRequest request;
  request.max_tokens =
      resolve_max_tokens(options.max_tokens, static_cast<int64_t>(prompt.size()), model.context_length(),
                         model.default_max_tokens());
  request.prompt = std::move(prompt);
  request.sampling = options.sampling;
  request.eos_token_ids = model.eos_token_ids();
  request.ignore_eos = options.ignore_eos;
  if (options.constraint) {
    if (thinking && model.think_end_id() < 0)
      throw api::ApiError(400, "a constrained answer in thinking mode needs a </think> token, which this tokenizer lacks",
                          options.constraint->field);
    // A tool-call constraint under auto with thinking on covers the reasoning too (a calls block
    // may open from it); any other starts after </think>.
    const bool covers_reasoning = options.constraint->kind == api::ConstraintSpec::Kind::ToolCalls &&
                                  options.constraint->tool_calls->from_reasoning;
    request.sampling.constraint =
        model.constraints().compile(*options.constraint, thinking && !covers_reasoning ? model.think_end_id() : -1);
  }
  try {
    engine::validate(request.sampling, model.model().vocab_size());
  } catch (const Error& error) {
    throw api::ApiError(400, error.what());
  }
  return request;
}


namespace {

// The answer of a chat-style request, driven by the connection (http_message.h): each pump()
// takes what the engine has produced and turns it into SSE frames, or gathers it for the body.
class ChatStyleProducer final : public ResponseProducer {
 public:
  ChatStyleProducer(const HandlerContext& context, ChatStyleJob job, std::string path, Clock::time_point arrival)
      : context_(context), path_(std::move(path)) {
    ChoiceOutputOptions choice_options{job.request.sampling.logprobs.has_value(), job.request.ignore_eos};
    generation_ = std::make_unique<Generation>(context.model, std::move(job.request), arrival);
    output_ = std::make_unique<ChoiceOutput>(context.model, job.parsing, choice_options);
    job_ = std::move(job);
  }
  ~ChatStyleProducer() override { abandon(); }

  bool streaming() const override { return job_.stream; }
  void set_wakeup(std::function<void()> wakeup) override { generation_->set_wakeup(std::move(wakeup)); }

  bool pump(std::string& out, HttpResponse& response) override {
    if (reported_) return true;
    if (!job_.stream) {
      try {
        while (auto event = generation_->poll()) {
          for (const api::StreamEvent& e : output_->add(*event)) collected_.add(e);
          if (output_->done()) generation_->cancel();  // a stop string matched: no more tokens are needed
        }
      } catch (const api::ApiError& error) {
        send_error(path_, response, error);
        return finish(error.status(), false);
      }
      if (!generation_->finished()) return false;
      api::WireJson body = job_.body(collected_);
      api::add_warnings(body, job_.warnings);
      send_json(response, body);
      return finish(200, false);
    }
    try {
      // A bounded batch per pump, so one busy stream does not hold its thread from the others.
      for (int taken = 0; taken < 64 && !generation_->finished(); ++taken) {
        auto event = generation_->poll();
        if (!event) return false;
        for (const api::StreamEvent& e : output_->add(*event))
          for (const std::string& frame : job_.frames(e)) out += frame;
        if (output_->done()) generation_->cancel();
      }
      if (!generation_->finished()) return false;
      out += job_.end_frame;
    } catch (const api::ApiError& error) {
      out += job_.error_frame(error);
    }
    return finish(200, false);
  }

  void abandon() override {
    if (reported_) return;
    finish(kClientClosedRequest, true);
  }

 private:
  bool finish(int status, bool client_left) {
    // Cancel before reporting so a departed client's blocks are free by the time it is logged.
    if (!generation_->finished()) generation_->cancel();
    reported_ = true;
    context_.report(job_.id, generation_->record(job_.endpoint, status), generation_->cached_tokens(), client_left);
    return true;
  }

  HandlerContext context_;
  std::string path_;
  ChatStyleJob job_;
  std::unique_ptr<Generation> generation_;
  std::unique_ptr<ChoiceOutput> output_;
  api::CollectedOutput collected_;
  bool reported_ = false;
};

}  // namespace

void respond_chat_style(const HandlerContext& context, ChatStyleJob job, const HttpRequest& request,
                        Clock::time_point arrival, HttpResponse& response) {
  response.producer = std::make_shared<ChatStyleProducer>(context, std::move(job), request.path, arrival);
}

}  // namespace deepinfer::server

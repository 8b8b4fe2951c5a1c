#include "server/chat_style_response.h"

#include <memory>

#include "api/tool_call_constraint.h"
#include "server/client_connection.h"
#include "server/event_stream.h"
#include "server/http_io.h"

namespace deepinfer::server {
namespace {

constexpr std::chrono::milliseconds kPoll{100};  // how often a quiet stream checks its client

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
  job.parsing = chat_parsing_options(parsed, prompt, parse_tools_whenever_given);
  job.stream = parsed.options.stream;
  return job;
}

engine::GenerationRequest make_generation_request(const ServedModel& model, std::vector<int32_t> prompt,
                                                  const api::GenerationOptions& options, bool thinking) {
  check_prompt_vocabulary(prompt, model.model().vocab_size());
  engine::GenerationRequest request;
  request.max_tokens =
      resolve_max_tokens(options.max_tokens, static_cast<int64_t>(prompt.size()), model.context_length());
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


void respond_chat_style(const HandlerContext& context, ChatStyleJob job, const httplib::Request& request,
                        Clock::time_point arrival, httplib::Response& response) {
  ChoiceOutputOptions choice_options{job.request.sampling.logprobs.has_value(), job.request.ignore_eos};
  auto generation = std::make_shared<Generation>(context.model, std::move(job.request), arrival);
  auto output = std::make_shared<ChoiceOutput>(context.model, job.parsing, choice_options);

  if (!job.stream) {
    api::CollectedOutput collected;
    ClientConnection client(request);
    while (!generation->finished()) {
      auto event = generation->next(kPoll);
      if (client.gone()) {
        generation->cancel();
        context.report(job.id, generation->record(job.endpoint, kClientClosedRequest), generation->cached_tokens(),
                       /*client_disconnected=*/true);
        response.status = kClientClosedRequest;
        return;
      }
      if (!event) continue;
      for (const api::StreamEvent& out : output->add(*event)) collected.add(out);
      if (output->done()) generation->cancel();  // a stop string matched: no more tokens are needed
    }
    send_json(response, job.body(collected));
    context.report(job.id, generation->record(job.endpoint, 200), generation->cached_tokens());
    return;
  }

  auto shared_job = std::make_shared<ChatStyleJob>(std::move(job));
  send_event_stream(
      response,
      [generation, output, shared_job](EventSink& sink) {
        try {
          while (!generation->finished()) {
            auto event = generation->next(kPoll);
            if (!sink.alive()) return;  // the client left: the Generation's owner cancels it
            if (!event) continue;
            for (const api::StreamEvent& out : output->add(*event))
              for (const std::string& frame : shared_job->frames(out))
                if (!sink.write(frame)) return;
            if (output->done()) generation->cancel();
          }
          sink.write(shared_job->end_frame);
        } catch (const api::ApiError& error) {
          sink.write(shared_job->error_frame(error));
        }
      },
      [context, generation, shared_job](bool client_stayed) {
        // Cancel before reporting so a departed client's blocks are free by the time it is logged.
        if (!generation->finished()) generation->cancel();
        context.report(shared_job->id, generation->record(shared_job->endpoint, 200), generation->cached_tokens(),
                       !client_stayed);
      });
}

}  // namespace deepinfer::server

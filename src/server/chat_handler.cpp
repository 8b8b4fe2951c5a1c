#include <memory>
#include <utility>

#include "api/chunk_chat_completions.h"
#include "api/request.h"
#include "server/chat_style_response.h"
#include "server/handlers.h"
#include "server/http_io.h"

namespace deepinfer::server {

void handle_chat_completions(const HandlerContext& context, const HttpRequest& request,
                             HttpResponse& response, Clock::time_point arrival) {
  const api::ApiRequest parsed = api::parse_chat_completions_request(parse_json_body(request));
  ChatStyleJob job = chat_style_job(context, parsed, "/v1/chat/completions", make_response_id("chatcmpl-"),
                                    /*parse_tools_whenever_given=*/false);

  api::ChatCompletionsFormat format;
  format.id = job.id;
  format.model = context.model.name();
  format.created = unix_seconds();
  format.thinking = parsed.conversation.thinking;
  format.include_usage = !job.stream || parsed.options.include_usage;
  format.logprobs = parsed.options.sampling.logprobs.has_value();
  if (job.stream) {
    auto writer = std::make_shared<api::ChatCompletionsChunkWriter>(format);
    job.frames = [writer, warnings = job.warnings, first = true](const api::StreamEvent& event) mutable {
      std::vector<std::string> frames;
      for (api::WireJson& chunk : writer->write(event)) {
        if (std::exchange(first, false)) api::add_warnings(chunk, warnings);
        frames.push_back(api::sse_data(chunk));
      }
      return frames;
    };
    job.end_frame = api::sse_done();
    job.error_frame = [](const api::ApiError& error) { return "data: " + error_body(error) + "\n\n"; };
  } else {
    job.body = [format](const api::CollectedOutput& output) { return api::chat_completion_body(format, output); };
  }
  respond_chat_style(context, std::move(job), request, arrival, response);
}

}  // namespace deepinfer::server

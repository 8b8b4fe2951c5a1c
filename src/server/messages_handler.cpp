#include <memory>

#include "api/chunk_anthropic_messages.h"
#include "api/request.h"
#include "server/chat_style_response.h"
#include "server/handlers.h"
#include "server/http_io.h"

namespace deepinfer::server {

void handle_messages(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                     Clock::time_point arrival) {
  const api::ApiRequest parsed = api::parse_messages_request(parse_json_body(request));
  ChatStyleJob job = chat_style_job(context, parsed, "/v1/messages", make_response_id("msg_"),
                                    /*parse_tools_whenever_given=*/true);

  const api::MessagesFormat format{job.id, context.model.name()};
  if (job.stream) {
    auto writer = std::make_shared<api::MessagesEventWriter>(format);
    job.frames = [writer, warnings = job.warnings](const api::StreamEvent& event) {
      std::vector<std::string> frames;
      for (api::MessagesEvent& out : writer->write(event)) {
        if (out.type == "message_start") api::add_warnings(out.data["message"], warnings);
        frames.push_back(api::sse_event(out.type, out.data));
      }
      return frames;
    };
    // Anthropic's stream error event: the same error object a refused request gets as its body.
    job.error_frame = [](const api::ApiError& error) { return api::sse_event("error", api::messages_error(error)); };
  } else {
    job.body = [format](const api::CollectedOutput& output) { return api::messages_body(format, output); };
  }
  respond_chat_style(context, std::move(job), request, arrival, response);
}

}  // namespace deepinfer::server

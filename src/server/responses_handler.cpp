#include <memory>
#include <variant>

#include "api/chunk_responses.h"
#include "api/output_responses_body.h"
#include "api/request.h"
#include "server/chat_style_response.h"
#include "server/handlers.h"
#include "server/http_io.h"

namespace deepinfer::server {

void handle_responses(const HandlerContext& context, const HttpRequest& request, HttpResponse& response,
                      Clock::time_point arrival) {
  const api::ApiRequest parsed = api::parse_responses_request(parse_json_body(request));
  ChatStyleJob job = chat_style_job(context, parsed, "/v1/responses", make_response_id("resp_"),
                                    /*parse_tools_whenever_given=*/false);

  api::ResponsesFormat format;
  format.id = job.id;
  format.model = context.model.name();
  format.created_at = unix_seconds();
  if (job.stream) {
    auto writer = std::make_shared<api::ResponsesEventWriter>(format);
    job.frames = [writer, warnings = job.warnings](const api::StreamEvent& event) {
      if (std::holds_alternative<api::StreamFinish>(event)) writer->set_completed_at(unix_seconds());
      std::vector<std::string> frames;
      for (api::ResponsesEvent& out : writer->write(event)) {
        // The response object as the stream first shows it, and as it shows it complete.
        if (out.type == "response.created" || out.type == "response.completed" || out.type == "response.incomplete")
          api::add_warnings(out.data["response"], warnings);
        frames.push_back(api::sse_event(out.type, out.data));
      }
      return frames;
    };
    job.error_frame = [writer](const api::ApiError& error) {
      const api::ResponsesEvent out = writer->error(error);
      return api::sse_event(out.type, out.data);
    };
  } else {
    job.body = [format](const api::CollectedOutput& output) {
      api::ResponsesFormat finished = format;
      finished.completed_at = unix_seconds();
      return api::responses_body(finished, output);
    };
  }
  respond_chat_style(context, std::move(job), request, arrival, response);
}

}  // namespace deepinfer::server

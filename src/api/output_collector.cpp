#include "api/output_collector.h"

#include <variant>

namespace deepinfer::api {

void CollectedOutput::add(const StreamEvent& event) {
  if (const auto* start = std::get_if<StreamStart>(&event)) {
    prompt = start->prompt;
  } else if (const auto* done = std::get_if<StreamFinish>(&event)) {
    finish = *done;
  } else {
    const OutputEvent& output = std::get<OutputEvent>(event);
    switch (output.kind) {
      case OutputEvent::Kind::reasoning_delta: reasoning += output.text; break;
      case OutputEvent::Kind::content_delta:
        content += output.text;
        content_logprobs.insert(content_logprobs.end(), output.logprobs.begin(), output.logprobs.end());
        break;
      case OutputEvent::Kind::tool_call_start: tool_calls.push_back({output.text, ""}); break;
      case OutputEvent::Kind::tool_call_arguments_delta:
        if (output.tool_index >= 0 && static_cast<std::size_t>(output.tool_index) < tool_calls.size())
          tool_calls[static_cast<std::size_t>(output.tool_index)].arguments += output.text;
        break;
    }
  }
}

}  // namespace deepinfer::api

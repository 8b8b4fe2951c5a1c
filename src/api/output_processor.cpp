#include "api/output_processor.h"

#include <utility>

namespace deepinfer::api {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::tool_calls: return "tool_calls";
    case FinishReason::content_filter: return "content_filter";
    case FinishReason::stop_sequence: return "stop_sequence";
    case FinishReason::end_of_stream: return "end_of_stream";
  }
  return "stop";
}

OutputProcessor::OutputProcessor(OutputParsingOptions options) : parser_(std::move(options)) {}

void OutputProcessor::start_if_needed(std::vector<StreamEvent>& events) {
  if (started_) return;
  started_ = true;
  events.emplace_back(StreamStart{prompt_});
}

std::vector<StreamEvent> OutputProcessor::ready(const PromptUsage& prompt) {
  std::vector<StreamEvent> events;
  // The start event has gone out with the usage it had; a late Ready cannot change it.
  if (started_ || done_) return events;
  prompt_ = prompt;
  start_if_needed(events);
  return events;
}

std::vector<StreamEvent> OutputProcessor::text(std::string_view piece, int64_t tokens) {
  std::vector<StreamEvent> events;
  if (done_) return events;
  start_if_needed(events);
  completion_.completion_tokens += tokens;
  if (parser_.in_reasoning()) completion_.reasoning_tokens += tokens;
  for (OutputEvent& event : parser_.feed(piece)) events.emplace_back(std::move(event));
  if (parser_.stopped()) {
    for (StreamEvent& event : complete(nullptr)) events.push_back(std::move(event));
  }
  return events;
}

std::vector<StreamEvent> OutputProcessor::finish(BackendFinish reason) { return complete(&reason); }

std::vector<StreamEvent> OutputProcessor::end_of_stream() { return complete(nullptr); }

std::vector<StreamEvent> OutputProcessor::complete(const BackendFinish* backend) {
  std::vector<StreamEvent> events;
  if (done_) return events;
  start_if_needed(events);
  done_ = true;
  for (OutputEvent& event : parser_.finish()) events.emplace_back(std::move(event));
  StreamFinish finish{FinishReason::end_of_stream, std::nullopt, prompt_, completion_};
  if (parser_.stopped()) {
    finish.reason = FinishReason::stop_sequence;
    finish.stop_sequence = parser_.matched_stop_sequence();
  } else if (backend != nullptr) {
    switch (*backend) {
      case BackendFinish::stop:
        finish.reason = parser_.tool_call_count() > 0 ? FinishReason::tool_calls : FinishReason::stop;
        break;
      case BackendFinish::length: finish.reason = FinishReason::length; break;
      case BackendFinish::content_filter: finish.reason = FinishReason::content_filter; break;
    }
  }
  events.emplace_back(std::move(finish));
  return events;
}

}  // namespace deepinfer::api

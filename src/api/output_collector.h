#pragma once
// Gathers a whole answer from its StreamEvents, for the non-streaming response bodies.
#include <optional>
#include <string>
#include <vector>

#include "api/output_events.h"

namespace deepinfer::api {

struct CollectedToolCall {
  std::string name;
  std::string arguments;  // JSON text as the model wrote it (may be cut short)
};

struct CollectedOutput {
  PromptUsage prompt;
  std::string reasoning;
  std::string content;
  std::vector<CollectedToolCall> tool_calls;
  std::vector<TokenLogprob> content_logprobs;
  std::optional<StreamFinish> finish;  // set once the answer is complete

  void add(const StreamEvent& event);
};

}  // namespace deepinfer::api

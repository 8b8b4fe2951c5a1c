#pragma once
// Drives OutputParser with what the backend reports for one request (docs/recipe.md §2.3): the
// prompt usage once the prompt is cached, generated text pieces with their token counts, and the
// finish. Produces the whole answer as StreamEvents: exactly one StreamStart first, exactly one
// StreamFinish last, with the finish reason resolved and the usage counted.
#include <cstdint>
#include <string_view>
#include <vector>

#include "api/output_events.h"
#include "api/output_parser.h"

namespace deepinfer::api {

class OutputProcessor {
 public:
  explicit OutputProcessor(OutputParsingOptions options);

  // The prompt is in: its usage and the fingerprint. Only the first call before any text counts.
  std::vector<StreamEvent> ready(const PromptUsage& prompt);
  // The next generated text and the number of tokens it took (decoded with markers kept, EOS
  // excluded). Tokens of a piece that starts inside <think> count as reasoning tokens. After a
  // stop string this ends the answer; later calls return nothing.
  std::vector<StreamEvent> text(std::string_view piece, int64_t tokens);
  // The backend stopped.
  std::vector<StreamEvent> finish(BackendFinish reason);
  // The backend's output ended without a finish (finish reason end_of_stream).
  std::vector<StreamEvent> end_of_stream();

  // The next text() starts inside <think>: its tokens are reasoning tokens.
  bool in_reasoning() const { return parser_.in_reasoning(); }
  // StreamFinish has been produced; nothing more will be.
  bool done() const { return done_; }

 private:
  void start_if_needed(std::vector<StreamEvent>& events);
  std::vector<StreamEvent> complete(const BackendFinish* backend);

  OutputParser parser_;
  PromptUsage prompt_;
  CompletionUsage completion_;
  bool started_ = false;
  bool done_ = false;
};

}  // namespace deepinfer::api

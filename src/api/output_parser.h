#pragma once
// The streaming state machine that splits a DeepSeek V4 / V4.1 answer into reasoning, content and
// tool calls (docs/recipe.md §2.2). It works byte by byte: text that could still be the start of a
// marker or a stop string is held back until it either completes or cannot, so the events do not
// depend on how the text was split into pieces (only how finely the deltas are cut does).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/output_events.h"

namespace deepinfer::api {

struct OutputParsingOptions {
  // Recognise DSML tool-call blocks (tools given and tool_choice is not none).
  bool parse_tool_calls = false;
  // The prompt already opened a tool-call block (tool_choice required): start inside it.
  bool start_in_tool_calls = false;
  // response_format json_object: text outside the JSON becomes one space per run.
  bool json_output = false;
  // The prompt ended with <think>: the answer starts with reasoning.
  bool thinking = false;
  // Matched in answer text (and inside detected JSON) only; empty strings are ignored.
  std::vector<std::string> stop_sequences;
};

class OutputParser {
 public:
  explicit OutputParser(OutputParsingOptions options);
  ~OutputParser();
  OutputParser(OutputParser&&) noexcept;
  OutputParser& operator=(OutputParser&&) noexcept;

  // Parses the next piece of generated text; returns what it completed. Consecutive text of one
  // kind within a piece comes as one event.
  std::vector<OutputEvent> feed(std::string_view text);
  // The text has ended: flushes what was held back (a partial marker is then just text).
  std::vector<OutputEvent> finish();

  // A stop string matched; the rest of the output is to be discarded.
  bool stopped() const;
  // The stop string that matched (empty unless stopped()).
  const std::string& matched_stop_sequence() const;
  // Inside <think>...</think>: the next piece is reasoning unless it ends the reasoning.
  bool in_reasoning() const;
  // Tool calls started so far.
  int tool_call_count() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace deepinfer::api

#pragma once
// Protocol-neutral events of one generated answer: what the output parser recognised in the model's
// text, plus the start (prompt usage) and the finish (reason, usage). Protocol writers
// (chunk_chat_completions.h, chunk_anthropic_messages.h) turn them into wire JSON.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace deepinfer::api {

// One generated token's log-probability (Chat Completions `logprobs.content[]`). `bytes` are the
// token's raw bytes (part of a character for a token that splits one); `token` is their text with
// U+FFFD where they are not whole UTF-8.
struct LogprobAlternative {
  std::string token;
  std::string bytes;
  float logprob = 0;
  bool operator==(const LogprobAlternative&) const = default;
};
struct TokenLogprob {
  std::string token;
  std::string bytes;
  float logprob = 0;
  std::vector<LogprobAlternative> top_logprobs;  // best first
  bool operator==(const TokenLogprob&) const = default;
};

// A piece of the answer recognised by OutputParser.
struct OutputEvent {
  enum class Kind {
    reasoning_delta,            // text: reasoning (thinking) text
    content_delta,              // text: answer text
    tool_call_start,            // text: the tool's name; tool_index: 0, 1, ... in call order
    tool_call_arguments_delta,  // text: the next piece of the call's arguments JSON
  };
  Kind kind;
  std::string text;
  int tool_index = -1;  // set for the tool-call kinds only
  // content_delta only, when the request asked for logprobs: the answer tokens that reached the
  // content since the previous content_delta (a token whose text the parser holds back comes
  // with the event that releases it).
  std::vector<TokenLogprob> logprobs = {};

  bool operator==(const OutputEvent&) const = default;
};

// Why the backend stopped generating.
enum class BackendFinish { stop, length, content_filter };

// Why the answer ended, after output parsing (docs/recipe.md §2.3).
enum class FinishReason {
  stop,            // the model ended its turn
  length,          // max_tokens or the context limit
  tool_calls,      // the model ended its turn after calling tools
  content_filter,  // the backend filtered the output
  stop_sequence,   // a request stop string matched (the string itself is never emitted)
  end_of_stream,   // the backend stopped without saying why
};
std::string_view finish_reason_name(FinishReason reason);

struct PromptUsage {
  std::optional<std::string> system_fingerprint;
  int64_t prompt_tokens = 0;
  int64_t prompt_cache_hit_tokens = 0;
};

struct CompletionUsage {
  int64_t completion_tokens = 0;  // every generated token, markup and reasoning included
  int64_t reasoning_tokens = 0;   // the part of completion_tokens spent inside <think>...</think>
};

// First event of every answer; carries the prompt side of the usage.
struct StreamStart {
  PromptUsage prompt;
};

// Last event of every answer.
struct StreamFinish {
  FinishReason reason = FinishReason::stop;
  std::optional<std::string> stop_sequence;  // the matched stop string, for stop_sequence
  PromptUsage prompt;
  CompletionUsage completion;
};

using StreamEvent = std::variant<StreamStart, OutputEvent, StreamFinish>;

}  // namespace deepinfer::api

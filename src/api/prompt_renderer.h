#pragma once
// Conversation -> DeepSeek V4 / V4.1 prompt, as deepseek-recipe renders it (recipe §1.2-§1.7, §1.9).
#include <string>
#include <vector>

#include "api/conversation.h"

namespace deepinfer::api {

// A prompt is a run of pieces: a marker is one control token; text is everything between markers
// and is encoded as plain BPE, so a client who types a marker's spelling in content gets ordinary
// text tokens (recipe §1.8, the fork's fix; docs/API.md).
struct PromptPiece {
  std::string text;
  bool is_marker = false;
};

// Where the model's output begins, for the output parser.
enum class OutputStart {
  Thinking,   // the prompt ends inside <think>
  Answer,     // the prompt ends after </think> (or inside a prefix-continued answer)
  ToolCalls,  // the prompt ends with a forced "<｜DSML｜ calls>\n" prefill
};

struct RenderedPrompt {
  std::vector<PromptPiece> pieces;
  OutputStart output_start = OutputStart::Answer;

  // The prompt string, markers spelled out.
  std::string text() const;
};

// The conversation must have passed the adapters' validation (request.h); rendering itself never
// fails.
RenderedPrompt render_prompt(const Conversation& conversation, PromptFormat format);

}  // namespace deepinfer::api

#pragma once
// When a request's tools constrain its answer (vLLM's and OpenAI's rules, docs/STRUCTURED.md):
// tool_choice required or named always (the answer is the calls block the prompt opened, every
// call's arguments valid against its tool's schema); auto when a tool is strict (a free answer,
// or a calls block in which the strict tools' arguments are constrained); otherwise never.
#include <optional>

#include "api/conversation.h"
#include "api/output_constraint.h"
#include "api/prompt_renderer.h"

namespace deepinfer::api {

// The constraint on the answer of `conversation` rendered as `prompt`, given `answer`, the
// request's own constraint (response_format, structured_outputs, ...). A forced call beside
// such a constraint is a 400: the answer cannot be both.
std::optional<ConstraintSpec> tool_call_constraint(const Conversation& conversation, const RenderedPrompt& prompt,
                                                   PromptFormat format, std::optional<ConstraintSpec> answer);

}  // namespace deepinfer::api

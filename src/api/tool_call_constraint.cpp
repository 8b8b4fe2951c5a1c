#include "api/tool_call_constraint.h"

#include <algorithm>
#include <memory>

#include "api/api_error.h"
#include "core/error.h"

namespace deepinfer::api {

std::optional<ConstraintSpec> tool_call_constraint(const Conversation& conversation, const RenderedPrompt& prompt,
                                                   PromptFormat format, std::optional<ConstraintSpec> answer) {
  if (conversation.tools.empty() || conversation.tool_choice == ToolChoice::None) return answer;
  const bool forced = prompt.output_start == OutputStart::ToolCalls;
  const bool any_strict = std::any_of(conversation.tools.begin(), conversation.tools.end(),
                                      [](const ToolDefinition& tool) { return tool.strict; });
  if (!forced && !any_strict) return answer;
  if (forced && answer)
    reject(str_cat("tool_choice: a required or named tool_choice makes the answer a tool call, so ", answer->field,
                   " cannot constrain it as well"),
           "tool_choice");

  auto calls = std::make_shared<ToolCallSpec>();
  calls->mode = forced ? ToolCallSpec::Mode::Forced : ToolCallSpec::Mode::Optional;
  calls->single_call = (forced && conversation.tool_choice_named) || !conversation.parallel_tool_calls;
  calls->format = format;
  calls->from_reasoning = !forced && prompt.output_start == OutputStart::Thinking;
  for (const ToolDefinition& tool : conversation.tools)
    calls->tools.push_back({tool.name, tool.parameters, tool.strict, forced || tool.strict, tool.schema_field});

  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::ToolCalls;
  spec.field = forced ? "tool_choice" : "tools";
  spec.tool_calls = std::move(calls);
  if (answer) spec.answer = std::make_shared<const ConstraintSpec>(std::move(*answer));
  return spec;
}

}  // namespace deepinfer::api

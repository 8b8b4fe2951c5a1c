#pragma once
// The markup DeepSeek V4 / V4.1 models write around reasoning and tool calls, as the output parser
// matches it (docs/recipe.md §1.1, §2.2). V4.1 spells the block tags with a leading space
// ("<｜DSML｜ calls>"), V4 without ("<｜DSML｜tool_calls>"); the parser accepts both because it
// only looks for the parts they share.
#include <string_view>

#include "api/conversation.h"

namespace deepinfer::api::dsml {

// The block's tag names as the prompt renderer writes them, after "<｜DSML｜" / "</｜DSML｜"
// (recipe §1.5, §1.9); a constrained tool call writes the same.
struct TagNames {
  std::string_view calls;
  std::string_view invoke;
  std::string_view parameter;
};

inline TagNames tag_names(PromptFormat format) {
  if (format == PromptFormat::V4) return {"tool_calls", "invoke", "parameter"};
  return {" calls", " invoke", " parameter"};
}

inline constexpr std::string_view kReasoningEnd = "</think>";
inline constexpr std::string_view kOpenPrefix = "<｜DSML｜";    // any DSML opening tag
inline constexpr std::string_view kClosePrefix = "</｜DSML｜";  // any DSML closing tag
inline constexpr std::string_view kCallsEndV41 = "</｜DSML｜ calls>";
inline constexpr std::string_view kCallsEndV4 = "</｜DSML｜tool_calls>";
inline constexpr std::string_view kInvokeName = "invoke name=\"";
inline constexpr std::string_view kParameterName = "parameter name=\"";
inline constexpr std::string_view kStringTrue = "true\">";
inline constexpr std::string_view kStringFalse = "false\">";

}  // namespace deepinfer::api::dsml

#pragma once
// The grammar of a DSML tool-call block (recipe §1.5, §1.6) for constrained tool calls: exactly
// the markup the prompt renderer writes for past calls, so the output parser (output_parser.h)
// reads every answer the grammar accepts back into calls of the given tools whose arguments the
// tool's schema accepts. A string parameter is written as itself with string="true" (the schema's
// string values, none containing the "</｜DSML｜" that would end it early), any other value as
// JSON with string="false"; declared parameters come in the schema's order, each at most once,
// the required ones always.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/conversation.h"
#include "grammar/compile.h"
#include "grammar/grammar.h"

namespace deepinfer::api {

struct ToolCallSpec {
  enum class Mode {
    Forced,    // the prompt opened the calls block (tool_choice required or named): calls, then its end
    Optional,  // tool_choice auto: an answer that opens no DSML block, or an answer that is a calls block
  };
  struct Tool {
    std::string name;
    nlohmann::ordered_json parameters;  // null: the tool takes none
    bool strict = false;                // the schema's strict reading: no undeclared keys in objects
    bool constrained = true;            // false: any parameters (a non-strict tool under auto)
    std::string field;                  // where the schema is in the request, for 400s
  };
  Mode mode = Mode::Forced;
  bool single_call = false;  // one call per block (a named tool_choice, parallel_tool_calls false)
  // Optional mode with thinking on: the grammar covers the output from the reasoning on (a calls
  // block may open straight from it), instead of starting after "</think>".
  bool from_reasoning = false;
  PromptFormat format = PromptFormat::V41;
  std::vector<Tool> tools;
};

// `answer` (Optional mode): the grammar of an answer that is not a tool call (a response_format);
// null: any text that does not open a DSML block. Throws ApiError 400 naming the tool's schema
// field, and the JSON pointer inside it, for a schema that cannot be enforced; each schema and the
// whole block within `limits` (a grammar::CompileTimeout past its deadline).
grammar::Grammar tool_call_grammar(const ToolCallSpec& spec, const grammar::Grammar* answer,
                                   const grammar::CompileLimits& limits = {});

}  // namespace deepinfer::api

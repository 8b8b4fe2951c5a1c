#pragma once
// The structured-output fields of a request body into GenerationOptions::constraint, with one
// reading for every endpoint (api/output_constraint.h says which forms exist).
#include <optional>

#include "api/output_constraint.h"
#include "api/request_fields.h"

namespace deepinfer::api {

// OpenAI `response_format` {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict"}} (Chat Completions and Completions), read from `format` named `where`.
// Returns true for json_object (the prompt's JSON mode applies too).
bool read_response_format(const fields::Json& format, const std::string& where, std::optional<ConstraintSpec>& slot);

// Responses `text.format`: {"type": "text" | "json_object" | "json_schema", "name", "schema",
// "strict"} (the schema sits in the format itself). Returns true for json_object.
bool read_responses_format(const fields::Json& format, std::optional<ConstraintSpec>& slot);

// Anthropic's JSON outputs: `output_config.format` (and the beta's top-level `output_format`,
// which it replaced) {"type": "json_schema", "schema": {...}}, read from `format` named `where`.
// Any other type, or any other field, is a 400.
void read_anthropic_format(const fields::Json& format, const std::string& where, std::optional<ConstraintSpec>& slot);

// vLLM's `structured_outputs` {json | regex | choice | grammar | json_object, plus
// disable_any_whitespace / disable_additional_properties}, SGLang's `regex` / `ebnf`, and the
// removed `guided_*` fields (a 400 saying what replaced them: vLLM now ignores them silently).
void read_engine_constraints(const fields::Json& body, std::optional<ConstraintSpec>& slot);

}  // namespace deepinfer::api

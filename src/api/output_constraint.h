#pragma once
// Structured output requests, as clients send them, to the engine's grammar constraint: OpenAI's
// response_format (json_schema, json_object), vLLM's structured_outputs (json, regex, choice,
// grammar, json_object) and SGLang's regex / ebnf fields all become one ConstraintSpec; compiling
// it (grammar/compile.h) is the server's, with the tokenizer and a cache (ConstraintCompiler).
// A constraint that cannot be enforced exactly is a 400 naming where and why, never ignored.
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/tool_call_grammar.h"
#include "engine/sampling_params.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"

namespace deepinfer::api {

struct ConstraintSpec {
  enum class Kind { JsonSchema, JsonObject, Regex, Gbnf, Lark, Choice, ToolCalls };
  Kind kind = Kind::JsonObject;
  nlohmann::ordered_json schema;     // JsonSchema (ordered: the properties' order is the schema's)
  std::string text;                  // Regex, Gbnf, Lark
  std::vector<std::string> choices;  // Choice: the output is exactly one of them
  bool strict = false;               // JsonSchema: no keys beyond `properties`
  std::string field;                 // the request field it came from, for 400s
  std::shared_ptr<const ToolCallSpec> tool_calls;  // ToolCalls (tool_call_constraint.h makes one)
  // ToolCalls in Optional mode: the constraint on an answer that is not a tool call (a
  // response_format); none: free text.
  std::shared_ptr<const ConstraintSpec> answer;
};

// One constraint per request: a second one is a 400 naming both fields.
void set_constraint(std::optional<ConstraintSpec>& slot, ConstraintSpec spec);

// Compiled constraints by content, shared across requests (a schema sent with every request of a
// client compiles once). Thread-safe; the oldest entries go past `capacity`.
class ConstraintCompiler {
 public:
  explicit ConstraintCompiler(std::shared_ptr<const grammar::Vocabulary> vocabulary, std::size_t capacity = 256)
      : vocabulary_(std::move(vocabulary)), capacity_(capacity) {}

  // The engine's constraint; the grammar applies after `after_token` (-1: from the start).
  // Throws ApiError 400 (the compile error's place and reason) for what cannot be enforced.
  engine::OutputConstraint compile(const ConstraintSpec& spec, int32_t after_token);

 private:
  std::shared_ptr<const grammar::Vocabulary> vocabulary_;
  std::size_t capacity_;
  std::mutex mutex_;
  std::list<std::string> order_;  // oldest first
  std::unordered_map<std::string, std::shared_ptr<const grammar::CompiledGrammar>> cache_;
};

// The grammar of `spec` (uncached; ConstraintCompiler::compile's work). Throws grammar::CompileError,
// or for ToolCalls an ApiError naming the tool or answer field at fault.
grammar::Grammar constraint_grammar(const ConstraintSpec& spec);

}  // namespace deepinfer::api

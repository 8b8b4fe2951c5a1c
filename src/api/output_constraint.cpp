#include "api/output_constraint.h"

#include "api/api_error.h"
#include "api/dsml_tags.h"
#include "core/error.h"

namespace deepinfer::api {
namespace {

const char* kind_name(ConstraintSpec::Kind kind) {
  switch (kind) {
    case ConstraintSpec::Kind::JsonSchema: return "json_schema";
    case ConstraintSpec::Kind::JsonObject: return "json_object";
    case ConstraintSpec::Kind::Regex: return "regex";
    case ConstraintSpec::Kind::Gbnf: return "gbnf";
    case ConstraintSpec::Kind::Lark: return "lark";
    case ConstraintSpec::Kind::Choice: return "choice";
    case ConstraintSpec::Kind::ToolCalls: return "tool_calls";
  }
  return "?";
}

// The cache key: the kind, the options that change the grammar, and the source.
std::string cache_key(const ConstraintSpec& spec) {
  std::string key = kind_name(spec.kind);
  key += spec.strict ? "/strict/" : "/";
  switch (spec.kind) {
    case ConstraintSpec::Kind::JsonSchema: key += spec.schema.dump(); break;
    case ConstraintSpec::Kind::Choice: key += nlohmann::json(spec.choices).dump(); break;
    case ConstraintSpec::Kind::ToolCalls: {
      const ToolCallSpec& calls = *spec.tool_calls;
      nlohmann::ordered_json tools = nlohmann::ordered_json::array();
      for (const ToolCallSpec::Tool& tool : calls.tools)
        tools.push_back({tool.name, tool.parameters, tool.strict, tool.constrained});
      key += nlohmann::ordered_json{calls.mode == ToolCallSpec::Mode::Forced, calls.single_call,
                                    calls.format == PromptFormat::V4, tools}
                 .dump();
      if (spec.answer) key += "/answer/" + cache_key(*spec.answer);
      break;
    }
    default: key += spec.text; break;
  }
  return key;
}

// The grammar of `spec`; `excluded_text`: text no JSON string may contain (an answer beside a
// tool-call block must not open one inside its strings).
grammar::Grammar grammar_of(const ConstraintSpec& spec, const std::string& excluded_text);

// An answer's grammar beside a tool-call block, its compile errors named after its own field.
grammar::Grammar answer_grammar(const ConstraintSpec& answer) {
  try {
    return grammar_of(answer, std::string(dsml::kOpenPrefix));
  } catch (const grammar::CompileError& error) {
    throw ApiError(400, str_cat(answer.field, ": ", error.what()), answer.field);
  }
}

grammar::Grammar grammar_of(const ConstraintSpec& spec, const std::string& excluded_text) {
  grammar::JsonSchemaOptions json_options;
  json_options.excluded_text = excluded_text;
  switch (spec.kind) {
    case ConstraintSpec::Kind::JsonSchema: {
      json_options.strict = spec.strict;
      return grammar::compile_json_schema(spec.schema, json_options);
    }
    case ConstraintSpec::Kind::JsonObject: return grammar::any_json(/*object_only=*/true, json_options);
    case ConstraintSpec::Kind::Regex: return grammar::compile_regex(spec.text);
    case ConstraintSpec::Kind::Gbnf: return grammar::compile_gbnf(spec.text);
    case ConstraintSpec::Kind::Lark: return grammar::compile_lark(spec.text);
    case ConstraintSpec::Kind::Choice: {
      if (spec.choices.empty()) throw grammar::CompileError("", "choice: the list is empty");
      grammar::Grammar g;
      const grammar::RuleId start = g.add_rule("choice");
      for (const std::string& choice : spec.choices) g.add_alternative(start, g.literal(choice));
      g.set_start(start);
      return g;
    }
    case ConstraintSpec::Kind::ToolCalls: {
      if (!spec.answer) return tool_call_grammar(*spec.tool_calls, nullptr);
      const grammar::Grammar answer = answer_grammar(*spec.answer);
      return tool_call_grammar(*spec.tool_calls, &answer);
    }
  }
  throw grammar::CompileError("", "unknown constraint kind");
}

}  // namespace

void set_constraint(std::optional<ConstraintSpec>& slot, ConstraintSpec spec) {
  if (slot)
    throw ApiError(400, str_cat("only one output constraint per request: ", slot->field, " and ", spec.field,
                                " were both given"),
                   spec.field);
  slot = std::move(spec);
}

grammar::Grammar constraint_grammar(const ConstraintSpec& spec) { return grammar_of(spec, ""); }

engine::OutputConstraint ConstraintCompiler::compile(const ConstraintSpec& spec, int32_t after_token) {
  const std::string key = cache_key(spec);
  std::shared_ptr<const grammar::CompiledGrammar> compiled;
  {
    const std::lock_guard lock(mutex_);
    if (const auto found = cache_.find(key); found != cache_.end()) compiled = found->second;
  }
  if (!compiled) {
    try {
      compiled = grammar::prepare(constraint_grammar(spec));
    } catch (const grammar::CompileError& error) {
      throw ApiError(400, str_cat(spec.field, ": ", error.what()), spec.field);
    }
    const std::lock_guard lock(mutex_);
    if (cache_.emplace(key, compiled).second) {
      order_.push_back(key);
      if (order_.size() > capacity_) {
        cache_.erase(order_.front());
        order_.pop_front();
      }
    }
  }
  return engine::OutputConstraint{compiled, vocabulary_, after_token};
}

}  // namespace deepinfer::api

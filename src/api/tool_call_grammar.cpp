#include "api/tool_call_grammar.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string_view>

#include "api/api_error.h"
#include "api/dsml_tags.h"
#include "core/error.h"
#include "api/prompt_markers.h"
#include "grammar/compile.h"
#include "grammar/free_text.h"

namespace deepinfer::api {
namespace {

using grammar::Grammar;
using grammar::RuleId;
using grammar::Sequence;
using grammar::Symbol;
using Json = nlohmann::ordered_json;

// The top-level keywords a tool's parameters may use: DSML writes an object as a list of named
// parameters, so only an object's own keywords (and annotations) have a DSML reading; anything
// else there (anyOf, $ref, patternProperties, ...) is a 400 rather than a weaker constraint.
// "x-guidance" (lenient, whitespace_flexible) is read by the schema compiler each parameter's
// value goes through, whose root is this whole schema.
const std::set<std::string, std::less<>> kTopLevelKeywords = {
    "type",  "properties", "required", "additionalProperties", "title",   "description", "$schema",
    "$id",   "$defs",      "definitions", "$comment",          "examples", "default",     "strict", "x-guidance"};

std::string pointer_token(std::string_view key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

Sequence cat(Sequence a, const Sequence& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class BlockGrammar {
 public:
  BlockGrammar(const ToolCallSpec& spec, const grammar::CompileLimits& limits)
      : spec_(spec), limits_(limits), tags_(dsml::tag_names(spec.format)) {}

  Grammar build(const Grammar* answer) {
    const RuleId calls = g_.add_rule("calls");
    g_.add_alternative(calls, cat({Grammar::rule(invokes())},
                                  g_.literal(str_cat("\n", dsml::kClosePrefix, tags_.calls, ">"))));
    if (spec_.mode == ToolCallSpec::Mode::Forced) {
      g_.set_start(calls);
    } else {
      const RuleId block = g_.add_rule("block");
      g_.add_alternative(block, cat(g_.literal(str_cat(dsml::kOpenPrefix, tags_.calls, ">\n")), {Grammar::rule(calls)}));
      const RuleId start = g_.add_rule("answer_or_calls");
      if (answer) {
        // The block instead of the answer, after the blank line the renderer puts before one.
        const RuleId answer_rule = g_.include(*answer);
        g_.add_alternative(start, {Grammar::rule(answer_rule)});
        g_.add_alternative(start, {Grammar::rule(block)});
        g_.add_alternative(start, cat(g_.literal("\n"), {Grammar::rule(block)}));
        g_.add_alternative(start, cat(g_.literal("\n\n"), {Grammar::rule(block)}));
      } else {
        // Text the parser keeps as content (it opens no DSML block), then perhaps the block.
        const RuleId text = g_.include(grammar::text_without(dsml::kOpenPrefix));
        g_.add_alternative(start, {Grammar::rule(text)});
        g_.add_alternative(start, {Grammar::rule(text), Grammar::rule(block)});
      }
      g_.set_start(start);
      if (spec_.from_reasoning) {
        // The output starts in the reasoning, which the parser leaves at "</think>" for the answer
        // or at "<｜DSML｜" straight into a calls block (recipe §2: Reasoning -> ToolCalls), so
        // that block is held to the tools' schemas too. The reasoning itself is free text (masks
        // of a few cached states), and the output may end in it, as an unconstrained one may.
        const RuleId reasoning = g_.include(
            grammar::text_without_any({std::string(markers::kThinkEnd), std::string(dsml::kOpenPrefix)}));
        const RuleId thinking = g_.add_rule("reasoning_then_answer_or_calls");
        g_.add_alternative(thinking, {Grammar::rule(reasoning)});
        g_.add_alternative(thinking,
                           cat(cat({Grammar::rule(reasoning)}, g_.literal(markers::kThinkEnd)), {Grammar::rule(start)}));
        g_.add_alternative(thinking, {Grammar::rule(reasoning), Grammar::rule(block)});
        g_.set_start(thinking);
      }
    }
    // Each schema was compiled within the limits; together they must be too.
    if (const int64_t limit = limits_.max_symbols; g_.size() > limit)
      throw ApiError(400, str_cat("tools: the tool-call grammar of these tools' schemas has ", g_.size(),
                                  " symbols, more than the limit of ", limit),
                     "tools");
    if (const int64_t limit = limits_.max_bytes; g_.bytes() > limit)
      throw ApiError(400, str_cat("tools: the tool-call grammar of these tools' schemas needs ", g_.bytes(),
                                  " bytes, more than the limit of ", limit),
                     "tools");
    g_.validate();
    return std::move(g_);
  }

 private:
  // One invoke of any tool, or (left recursive, so the chart stays small) several joined by '\n'.
  RuleId invokes() {
    const RuleId one = g_.add_rule("invoke");
    for (const ToolCallSpec::Tool& tool : spec_.tools) {
      Sequence invoke = g_.literal(str_cat(dsml::kOpenPrefix, tags_.invoke, " name=\"", tool.name, "\">\n"));
      invoke.push_back(Grammar::rule(tool.constrained ? schema_parameters(tool) : free_parameters()));
      g_.add_alternative(one, cat(invoke, g_.literal(str_cat("\n", dsml::kClosePrefix, tags_.invoke, ">"))));
    }
    if (spec_.single_call) return one;
    const RuleId many = g_.add_rule("invokes");
    g_.add_alternative(many, {Grammar::rule(one)});
    g_.add_alternative(many, cat(cat({Grammar::rule(many)}, g_.literal("\n")), {Grammar::rule(one)}));
    return many;
  }

  // <｜DSML｜ parameter name="KEY" string="true">RAW</｜DSML｜ parameter>, or string="false" and JSON.
  RuleId parameter(const Sequence& key, std::optional<RuleId> raw, std::optional<RuleId> json) {
    const RuleId value = g_.add_rule("value");
    if (raw) g_.add_alternative(value, cat(g_.literal("true\">"), {Grammar::rule(*raw)}));
    if (json) g_.add_alternative(value, cat(g_.literal("false\">"), {Grammar::rule(*json)}));
    const RuleId param = g_.add_rule("parameter");
    Sequence sequence = cat(g_.literal(str_cat(dsml::kOpenPrefix, tags_.parameter, " name=\"")), key);
    sequence = cat(sequence, g_.literal("\" string=\""));
    sequence.push_back(Grammar::rule(value));
    g_.add_alternative(param, cat(sequence, g_.literal(str_cat(dsml::kClosePrefix, tags_.parameter, ">"))));
    return param;
  }

  [[noreturn]] static void refuse(const ToolCallSpec::Tool& tool, const std::string& pointer, const std::string& why) {
    throw ApiError(400, str_cat(tool.field, pointer, ": ", why), tool.field);
  }

  // The declared parameters in the schema's order, each at most once and the required ones
  // always, joined by '\n' as the renderer joins them.
  RuleId schema_parameters(const ToolCallSpec::Tool& tool) {
    static const Json kNoParameters = Json::object();
    const Json& schema = tool.parameters.is_null() ? kNoParameters : tool.parameters;
    if (!schema.is_object()) refuse(tool, "", "a tool's parameters must be a JSON Schema of type object");
    for (const auto& [key, value] : schema.items())
      if (!kTopLevelKeywords.contains(key))
        refuse(tool, "/" + pointer_token(key),
               "not supported at the top of a constrained tool's parameters (DSML writes the arguments as named "
               "parameters: properties, required and additionalProperties have a reading there, this has none)");
    if (const auto type = schema.find("type"); type != schema.end() && *type != "object")
      refuse(tool, "/type", "a tool's parameters must be of type object");
    const auto properties = schema.find("properties");
    if (properties != schema.end() && !properties->is_object()) refuse(tool, "/properties", "must be an object");
    std::vector<std::string> required;
    if (const auto listed = schema.find("required"); listed != schema.end()) {
      if (!listed->is_array()) refuse(tool, "/required", "must be an array of property names");
      for (const Json& name : *listed) {
        if (!name.is_string()) refuse(tool, "/required", "must be an array of property names");
        if (std::find(required.begin(), required.end(), name.get<std::string>()) == required.end())
          required.push_back(name.get<std::string>());
      }
    }
    const auto additional = schema.find("additionalProperties");
    const bool closed = tool.strict || (additional != schema.end() && *additional == false);

    grammar::JsonSchemaOptions options;
    options.strict = tool.strict;
    options.excluded_text = std::string(dsml::kClosePrefix);
    struct Declared {
      RuleId rule;
      bool required;
    };
    std::vector<Declared> declared;
    const auto declare = [&](const std::string& name, const Json& document, const std::string& pointer) {
      const bool is_required = std::find(required.begin(), required.end(), name) != required.end();
      // The parser reads a parameter name up to the first '"'.
      if (name.find('"') != std::string::npos) {
        if (is_required) refuse(tool, pointer, "a DSML parameter name cannot contain '\"'");
        return;
      }
      grammar::SplitValueGrammars values;
      try {
        values = grammar::compile_json_schema_split(document, pointer, options, limits_);
      } catch (const grammar::CompileError& error) {
        throw ApiError(400, error.where().empty() ? str_cat(tool.field, pointer, ": ", error.what())
                                                  : str_cat(tool.field, error.what()),
                       tool.field);
      }
      if (!values.raw_string && !values.json_other) {
        if (is_required) refuse(tool, pointer, "the schema accepts no value, and the property is required");
        return;  // never written
      }
      std::optional<RuleId> raw, json;
      if (values.raw_string) raw = g_.include(*values.raw_string, tool.field);
      if (values.json_other) json = g_.include(*values.json_other, tool.field);
      declared.push_back({parameter(g_.literal(name), raw, json), is_required});
    };
    if (properties != schema.end())
      for (const auto& [name, value] : properties->items())
        declare(name, schema, "/properties/" + pointer_token(name));
    for (const std::string& name : required) {
      if (properties != schema.end() && properties->contains(name)) continue;
      if (closed) refuse(tool, "/required", str_cat("'", name, "' is required but not in properties, and no other key is allowed"));
      // An undeclared key takes additionalProperties' schema (any value where that is absent).
      static const Json kAnyValue = true;
      if (additional != schema.end() && additional->is_object()) {
        declare(name, schema, "/additionalProperties");
      } else {
        declare(name, kAnyValue, "");
      }
    }

    // first[k]: parameters k.. when none came before; rest[k]: the same after one did ('\n' first).
    const std::size_t n = declared.size();
    std::vector<RuleId> first(n + 1), rest(n + 1);
    for (std::size_t k = 0; k <= n; ++k) {
      first[k] = g_.add_rule("params");
      rest[k] = g_.add_rule("params_rest");
    }
    g_.add_alternative(first[n], {});
    g_.add_alternative(rest[n], {});
    for (std::size_t k = n; k-- > 0;) {
      const Symbol param = Grammar::rule(declared[k].rule);
      g_.add_alternative(first[k], {param, Grammar::rule(rest[k + 1])});
      g_.add_alternative(rest[k], cat(g_.literal("\n"), {param, Grammar::rule(rest[k + 1])}));
      if (!declared[k].required) {
        g_.add_alternative(first[k], {Grammar::rule(first[k + 1])});
        g_.add_alternative(rest[k], {Grammar::rule(rest[k + 1])});
      }
    }
    return first[0];
  }

  // Any parameters: names without '"', string values without "</｜DSML｜", any JSON otherwise.
  RuleId free_parameters() {
    if (free_parameters_) return *free_parameters_;
    grammar::JsonSchemaOptions options;
    options.excluded_text = std::string(dsml::kClosePrefix);
    const RuleId name = g_.include(grammar::text_without("\""));
    const RuleId raw = g_.include(grammar::text_without(dsml::kClosePrefix));
    const RuleId json = g_.include(grammar::any_json(/*object_only=*/false, options));
    const RuleId param = parameter({Grammar::rule(name)}, raw, json);
    const RuleId list = g_.add_rule("free_params");
    g_.add_alternative(list, {Grammar::rule(param)});
    g_.add_alternative(list, cat(cat({Grammar::rule(list)}, g_.literal("\n")), {Grammar::rule(param)}));
    const RuleId params = g_.add_rule("free_params_or_none");
    g_.add_alternative(params, {});
    g_.add_alternative(params, {Grammar::rule(list)});
    free_parameters_ = params;
    return params;
  }

  const ToolCallSpec& spec_;
  const grammar::CompileLimits& limits_;
  dsml::TagNames tags_;
  Grammar g_;
  std::optional<RuleId> free_parameters_;
};

}  // namespace

grammar::Grammar tool_call_grammar(const ToolCallSpec& spec, const grammar::Grammar* answer,
                                   const grammar::CompileLimits& limits) {
  if (spec.tools.empty()) throw ApiError(400, "a constrained tool call needs tools", "tools");
  return BlockGrammar(spec, limits).build(answer);
}

}  // namespace deepinfer::api

#include "api/request_constraint.h"

#include "api/api_error.h"
#include "core/error.h"

namespace deepinfer::api {
namespace {

ConstraintSpec schema_spec(const fields::Json& schema, bool strict, std::string field) {
  if (!schema.is_object() && !schema.is_boolean())
    throw ApiError(400, str_cat(field, ": a JSON schema is an object or a boolean"), field);
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::JsonSchema;
  spec.schema = schema;
  spec.strict = strict;
  spec.field = std::move(field);
  return spec;
}

}  // namespace

bool read_response_format(const fields::Json& format, const std::string& where, std::optional<ConstraintSpec>& slot) {
  const std::string& type =
      fields::string(fields::require(fields::object(format, where), "type", where + "."), where + ".type");
  if (type == "text") return false;
  if (type == "json_object") {
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::JsonObject;
    spec.field = where;
    set_constraint(slot, std::move(spec));
    return true;
  }
  if (type == "json_schema") {
    const std::string inner = where + ".json_schema";
    const fields::Json& json_schema = fields::object(fields::require(format, "json_schema", where + "."), inner);
    const fields::Json* schema = fields::find(json_schema, "schema");
    const bool strict = fields::optional_bool(json_schema, "strict").value_or(false);
    // OpenAI: a missing schema means any JSON object.
    if (!schema) {
      ConstraintSpec spec;
      spec.kind = ConstraintSpec::Kind::JsonObject;
      spec.field = inner;
      set_constraint(slot, std::move(spec));
    } else {
      set_constraint(slot, schema_spec(*schema, strict, inner + ".schema"));
    }
    return false;
  }
  // DeepSeek's API (the recipe's conformance vectors) words it this way; json_schema works too.
  throw ApiError(400, str_cat(where, ": only text and json_object are supported"), where);
}

bool read_responses_format(const fields::Json& format, std::optional<ConstraintSpec>& slot) {
  const std::string where = "text.format";
  const std::string& type =
      fields::string(fields::require(fields::object(format, where), "type", where + "."), where + ".type");
  if (type == "text") return false;
  if (type == "json_object") {
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::JsonObject;
    spec.field = where;
    set_constraint(slot, std::move(spec));
    return true;
  }
  if (type != "json_schema")
    throw ApiError(400, str_cat(where, ".type: expected text, json_object or json_schema, got '", type, "'"),
                   where + ".type");
  const bool strict = fields::optional_bool(format, "strict").value_or(false);
  set_constraint(slot, schema_spec(fields::require(format, "schema", where + "."), strict, where + ".schema"));
  return false;
}

void read_engine_constraints(const fields::Json& body, std::optional<ConstraintSpec>& slot) {
  for (const char* removed : {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend",
                              "guided_whitespace_pattern"})
    if (fields::find(body, removed))
      throw ApiError(400, str_cat(removed, " is not supported: use structured_outputs (vLLM's replacement) or "
                                           "response_format"),
                     removed);
  if (const fields::Json* outputs = fields::find(body, "structured_outputs")) {
    const fields::Json& object = fields::object(*outputs, "structured_outputs");
    bool strict = false;
    for (const auto& [key, value] : object.items()) {
      const std::string where = "structured_outputs." + key;
      if (key == "json") {
        set_constraint(slot, schema_spec(value.is_string() ? fields::Json::parse(value.get<std::string>(), nullptr, false)
                                                           : value,
                                         false, where));
      } else if (key == "regex" || key == "grammar") {
        ConstraintSpec spec;
        spec.kind = key == "regex" ? ConstraintSpec::Kind::Regex : ConstraintSpec::Kind::Gbnf;
        spec.text = fields::string(value, where);
        spec.field = where;
        set_constraint(slot, std::move(spec));
      } else if (key == "choice") {
        ConstraintSpec spec;
        spec.kind = ConstraintSpec::Kind::Choice;
        const fields::Json& list = fields::array(value, where);
        for (std::size_t i = 0; i < list.size(); ++i) spec.choices.push_back(fields::string(list[i], str_cat(where, "[", i, "]")));
        spec.field = where;
        set_constraint(slot, std::move(spec));
      } else if (key == "json_object") {
        if (fields::boolean(value, where)) {
          ConstraintSpec spec;
          spec.kind = ConstraintSpec::Kind::JsonObject;
          spec.field = where;
          set_constraint(slot, std::move(spec));
        }
      } else if (key == "disable_additional_properties") {
        strict = fields::boolean(value, where);
      } else if (key == "disable_any_whitespace" || key == "whitespace_pattern" || key == "structural_tag") {
        throw ApiError(400, str_cat(where, " is not supported yet"), where);
      } else {
        throw ApiError(400, str_cat(where, ": unknown structured_outputs field (expected json, regex, choice, grammar or "
                                           "json_object)"),
                       where);
      }
    }
    if (strict && slot && slot->kind == ConstraintSpec::Kind::JsonSchema) slot->strict = true;
  }
  if (const fields::Json* regex = fields::find(body, "regex")) {
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::Regex;
    spec.text = fields::string(*regex, "regex");
    spec.field = "regex";
    set_constraint(slot, std::move(spec));
  }
  if (const fields::Json* ebnf = fields::find(body, "ebnf")) {
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::Gbnf;
    spec.text = fields::string(*ebnf, "ebnf");
    spec.field = "ebnf";
    set_constraint(slot, std::move(spec));
  }
}

}  // namespace deepinfer::api

#include "api/request_constraint.h"

#include "api/api_error.h"
#include "core/error.h"

namespace deepinfer::api {
namespace {

using Kind = ConstraintSpec::Kind;

// The `type` of the response format `format` named `where` (an object with a string there).
const std::string& format_type(const fields::Json& format, const std::string& where) {
  return fields::string(fields::require(fields::object(format, where), "type", where + "."), where + ".type");
}

// A constraint of `kind` read from the request field `field`; the caller fills in what the kind
// carries (a schema, a text, choices).
ConstraintSpec spec_from(Kind kind, std::string field) {
  ConstraintSpec spec;
  spec.kind = kind;
  spec.field = std::move(field);
  return spec;
}

ConstraintSpec schema_spec(const fields::Json& schema, bool strict, std::string field) {
  if (!schema.is_object() && !schema.is_boolean())
    throw ApiError(400, str_cat(field, ": a JSON schema is an object or a boolean"), field);
  ConstraintSpec spec = spec_from(Kind::JsonSchema, std::move(field));
  spec.schema = schema;
  spec.strict = strict;
  return spec;
}

// A regex or grammar whose text is the string `value` of `field`.
ConstraintSpec text_spec(Kind kind, const fields::Json& value, std::string field) {
  ConstraintSpec spec = spec_from(kind, std::move(field));
  spec.text = fields::string(value, spec.field);
  return spec;
}

}  // namespace

bool read_response_format(const fields::Json& format, const std::string& where, std::optional<ConstraintSpec>& slot) {
  const std::string& type = format_type(format, where);
  if (type == "text") return false;
  if (type == "json_object") {
    set_constraint(slot, spec_from(Kind::JsonObject, where));
    return true;
  }
  if (type == "json_schema") {
    const std::string inner = where + ".json_schema";
    const fields::Json& json_schema = fields::object(fields::require(format, "json_schema", where + "."), inner);
    const fields::Json* schema = fields::find(json_schema, "schema");
    const bool strict = fields::optional_bool(json_schema, "strict").value_or(false);
    // OpenAI: a missing schema means any JSON object.
    if (!schema) {
      set_constraint(slot, spec_from(Kind::JsonObject, inner));
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
  const std::string& type = format_type(format, where);
  if (type == "text") return false;
  if (type == "json_object") {
    set_constraint(slot, spec_from(Kind::JsonObject, where));
    return true;
  }
  if (type != "json_schema")
    throw ApiError(400, str_cat(where, ".type: expected text, json_object or json_schema, got '", type, "'"),
                   where + ".type");
  const bool strict = fields::optional_bool(format, "strict").value_or(false);
  set_constraint(slot, schema_spec(fields::require(format, "schema", where + "."), strict, where + ".schema"));
  return false;
}

void read_anthropic_format(const fields::Json& format, const std::string& where, std::optional<ConstraintSpec>& slot) {
  const std::string& type = format_type(format, where);
  if (type != "json_schema")
    throw ApiError(400, str_cat(where, ".type: expected 'json_schema', got '", type, "'"), where + ".type");
  for (const auto& [key, value] : format.items())
    if (key != "type" && key != "schema")
      throw ApiError(400, str_cat(where, ".", key, ": unknown field (a format has type and schema)"), where + "." + key);
  set_constraint(slot, schema_spec(fields::require(format, "schema", where + "."), false, where + ".schema"));
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
    bool strict = false, compact = false;
    for (const auto& [key, value] : object.items()) {
      const std::string where = "structured_outputs." + key;
      if (key == "json") {
        set_constraint(slot, schema_spec(value.is_string() ? fields::Json::parse(value.get<std::string>(), nullptr, false)
                                                           : value,
                                         false, where));
      } else if (key == "regex" || key == "grammar") {
        set_constraint(slot, text_spec(key == "regex" ? Kind::Regex : Kind::Gbnf, value, where));
      } else if (key == "choice") {
        ConstraintSpec spec = spec_from(Kind::Choice, where);
        const fields::Json& list = fields::array(value, where);
        for (std::size_t i = 0; i < list.size(); ++i) spec.choices.push_back(fields::string(list[i], str_cat(where, "[", i, "]")));
        set_constraint(slot, std::move(spec));
      } else if (key == "json_object") {
        if (fields::boolean(value, where)) set_constraint(slot, spec_from(Kind::JsonObject, where));
      } else if (key == "disable_additional_properties") {
        strict = fields::boolean(value, where);
      } else if (key == "disable_any_whitespace") {
        compact = fields::boolean(value, where);
      } else if (key == "whitespace_pattern" || key == "structural_tag") {
        throw ApiError(400, str_cat(where, " is not supported yet"), where);
      } else {
        throw ApiError(400, str_cat(where, ": unknown structured_outputs field (expected json, regex, choice, grammar or "
                                           "json_object)"),
                       where);
      }
    }
    if (strict && slot && slot->kind == Kind::JsonSchema) slot->strict = true;
    // vLLM's flag for its JSON constraints (xgrammar's any_whitespace off); the others have no
    // JSON whitespace to remove.
    if (compact && slot && (slot->kind == Kind::JsonSchema || slot->kind == Kind::JsonObject)) slot->compact = true;
  }
  if (const fields::Json* regex = fields::find(body, "regex"))
    set_constraint(slot, text_spec(Kind::Regex, *regex, "regex"));
  if (const fields::Json* ebnf = fields::find(body, "ebnf"))
    set_constraint(slot, text_spec(Kind::Gbnf, *ebnf, "ebnf"));
}

}  // namespace deepinfer::api

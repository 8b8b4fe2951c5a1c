#pragma once
// Typed reads of request JSON that refuse with a 400 naming the field, and the checks the three
// adapters share.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "api/conversation.h"
#include "engine/sampling_params.h"

namespace deepinfer::api::fields {

using Json = nlohmann::ordered_json;

// The member, or nullptr when it is absent or JSON null (both mean "not given").
const Json* find(const Json& object, std::string_view key);
const Json& require(const Json& object, std::string_view key, const std::string& where);

const Json& object(const Json& value, const std::string& where);
const Json& array(const Json& value, const std::string& where);
const std::string& string(const Json& value, const std::string& where);
double number(const Json& value, const std::string& where);
int64_t integer(const Json& value, const std::string& where);
bool boolean(const Json& value, const std::string& where);

std::optional<double> optional_number(const Json& body, std::string_view key);
std::optional<int64_t> optional_integer(const Json& body, std::string_view key);
std::optional<bool> optional_bool(const Json& body, std::string_view key);

// "<name> must be in [lo, hi]" unless lo <= value <= hi.
void check_range(double value, double lo, double hi, std::string_view name);
// "max_tokens must be greater than zero".
void check_max_tokens(int64_t value);
// 1-128 of [A-Za-z0-9_-]; `where` names the field ("tools.0.function.name").
void check_tool_name(const std::string& name, const std::string& where);
// A JSON Schema object whose type (when given) is "object"; `where` names the field.
void check_parameters_schema(const Json& schema, const std::string& where);
// Values are printed into the prompt recursively: nesting is bounded so no request can exhaust
// the stack. `where` names the field.
inline constexpr int kMaxJsonNesting = 128;
void check_nesting(const Json& value, const std::string& where);

// `temperature` in [0, 2] and `top_p` in [0, 1] into `sampling`; top_p 0 keeps only the best
// token, which the sampler expresses as greedy.
void read_temperature_and_top_p(const Json& body, engine::SamplingParams& sampling);
// The string forms of tool_choice: "none", "auto", "required"; nullopt for anything else (each
// protocol words its own refusal).
std::optional<ToolChoice> tool_choice_mode(std::string_view mode);

}  // namespace deepinfer::api::fields

namespace deepinfer::api {

// Checks every adapter applies after conversion, in this order: no "<｜image｜>" literal in any
// client text; prefix only on a last assistant message without tool calls; tool names unique;
// a named or required tool_choice is refused in thinking mode; json_object mode needs the word
// "json" in the messages.
void validate_conversation(const Conversation& conversation);

// Applies a named tool choice: keeps only that tool and makes the choice Required. 400 when no
// tool has that name.
void choose_named_tool(Conversation& conversation, const std::string& name);

}  // namespace deepinfer::api

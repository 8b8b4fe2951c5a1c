#pragma once
// What a response says about its output constraint: each part of the request's schema the
// grammar does not enforce (a lenient schema's keywords; grammar::Grammar::relaxations), so a
// client that asked for leniency sees what it got instead of trusting a constraint that was
// not applied. Every endpoint carries them as a "warnings" array beside its answer: in the body,
// and in a stream's first object (Chat Completions' and Completions' first chunk, Messages'
// message_start message, Responses' created response and its final one).
#include <optional>

#include "api/sse_format.h"
#include "engine/sampling_params.h"

namespace deepinfer::api {

// [{"type": "constraint_not_enforced", "param": <request field>, "pointer": <JSON pointer in
// that field's schema>, "message"}], empty without a constraint or when it enforces everything.
WireJson constraint_warnings(const std::optional<engine::OutputConstraint>& constraint);

// Sets object["warnings"] when `warnings` has any.
void add_warnings(WireJson& object, const WireJson& warnings);

}  // namespace deepinfer::api

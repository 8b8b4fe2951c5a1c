#include "api/constraint_warnings.h"

#include "grammar/matcher.h"

namespace deepinfer::api {

WireJson constraint_warnings(const std::optional<engine::OutputConstraint>& constraint) {
  WireJson warnings = WireJson::array();
  if (!constraint || !constraint->grammar) return warnings;
  for (const grammar::Grammar::Relaxation& relaxation : grammar::relaxations(*constraint->grammar))
    warnings.push_back({{"type", "constraint_not_enforced"},
                        {"param", relaxation.field},
                        {"pointer", relaxation.where},
                        {"message", relaxation.what}});
  return warnings;
}

void add_warnings(WireJson& object, const WireJson& warnings) {
  if (!warnings.empty()) object["warnings"] = warnings;
}

}  // namespace deepinfer::api

// String formats (json_schema_internal.h), as anchored regular expressions.
//
// Each accepts a subset of what the format's RFC allows, chosen so that no common validator
// (Python jsonschema with its format checkers, the Rust jsonschema crate) rejects an accepted
// string. Where a format is narrowed, only valid-but-rare strings are lost:
//   date, date-time, time: RFC 3339 (real calendar days, leap years included), upper-case T and
//     Z only, no leap second (:60), years 0001-9999; time needs its offset.
//   email: a dot-atom local part, a domain of two or more DNS labels ending in a 2-63 letter
//     label; 64 code points at most (no quoted local parts, no IP-literal domains).
//   hostname: RFC 1123 labels, the last starting with a letter; 63 code points at most.
//   ipv4: dotted quad without leading zeros. ipv6: RFC 4291 text forms (no zone index).
//   uri, uri-reference: RFC 3986, ASCII only, no IP-literal host ([::1], [v1.x]).
//   uuid: 8-4-4-4-12 hex digits. json-pointer: RFC 6901.
#include <string>

#include "grammar/json_schema_internal.h"

namespace deepinfer::grammar::schema {
namespace {

std::string group(const std::string& inner) { return "(?:" + inner + ")"; }

const std::string kOctet = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
const std::string kIpv4 = kOctet + "(?:\\." + kOctet + "){3}";

std::string ipv6() {
  const std::string h = "[0-9A-Fa-f]{1,4}";
  auto groups = [&](int n) {
    std::string out;
    if (n > 0) out.append(h);
    if (n > 1) out.append("(?::").append(h).append("){").append(std::to_string(n - 1)).append("}");
    return out;
  };
  std::string alts = groups(8);
  alts.append("|").append(groups(6)).append(":").append(kIpv4);
  for (int left = 0; left <= 7; ++left)
    for (int right = 0; left + right <= 7; ++right) alts.append("|").append(groups(left)).append("::").append(groups(right));
  for (int left = 0; left <= 5; ++left)
    for (int right = 0; left + right <= 5; ++right) {
      alts.append("|").append(groups(left)).append("::");
      if (right > 0) alts.append(groups(right)).append(":");
      alts.append(kIpv4);
    }
  return group(alts);
}

const std::string kYear = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])";
const std::string kMonthDay =
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))";
const std::string kLeapYear = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)";
const std::string kDate = "(?:" + kYear + "-" + kMonthDay + "|" + kLeapYear + "-02-29)";
const std::string kTime =
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";

// RFC 3986.
const std::string kPct = "%[0-9A-Fa-f]{2}";
const std::string kPchar = "(?:[A-Za-z0-9\\-._~!$&'()*+,;=:@]|" + kPct + ")";
const std::string kSegment = kPchar + "*";
const std::string kSegmentNz = kPchar + "+";
const std::string kSegmentNzNc = "(?:[A-Za-z0-9\\-._~!$&'()*+,;=@]|" + kPct + ")+";
const std::string kQuery = "(?:" + kPchar + "|[/?])*";
const std::string kUserinfo = "(?:[A-Za-z0-9\\-._~!$&'()*+,;=:]|" + kPct + ")*";
const std::string kRegName = "(?:[A-Za-z0-9\\-._~!$&'()*+,;=]|" + kPct + ")*";

// No IP-literal host ([v6]): it would make the automaton ten times larger (and a length bound
// beside a uri format multiplies that again).
std::string authority() { return "(?:" + kUserinfo + "@)?" + kRegName + "(?::[0-9]*)?"; }

std::string uri() {
  const std::string abempty = "(?:/" + kSegment + ")*";
  const std::string absolute = "/(?:" + kSegmentNz + "(?:/" + kSegment + ")*)?";
  const std::string rootless = kSegmentNz + "(?:/" + kSegment + ")*";
  return "[A-Za-z][A-Za-z0-9+\\-.]*:(?://" + authority() + abempty + "|" + absolute + "|" + rootless + "|)(?:\\?" + kQuery +
         ")?(?:#" + kQuery + ")?";
}

std::string relative_ref() {
  const std::string abempty = "(?:/" + kSegment + ")*";
  const std::string absolute = "/(?:" + kSegmentNz + "(?:/" + kSegment + ")*)?";
  const std::string noscheme = kSegmentNzNc + "(?:/" + kSegment + ")*";
  return "(?://" + authority() + abempty + "|" + absolute + "|" + noscheme + "|)(?:\\?" + kQuery + ")?(?:#" + kQuery + ")?";
}

const std::string kLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
const std::string kLastLabel = "[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
const std::string kAtext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";

}  // namespace

std::optional<FormatSpec> format_spec(std::string_view format) {
  if (format == "date") return FormatSpec{kDate, -1};
  if (format == "time") return FormatSpec{kTime, -1};
  if (format == "date-time") return FormatSpec{kDate + "T" + kTime, -1};
  if (format == "uuid")
    return FormatSpec{"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}", -1};
  if (format == "ipv4") return FormatSpec{kIpv4, -1};
  if (format == "ipv6") return FormatSpec{ipv6(), -1};
  if (format == "hostname") return FormatSpec{"(?:" + kLabel + "\\.)*" + kLastLabel, 63};
  if (format == "email")
    return FormatSpec{kAtext + "+(?:\\." + kAtext + "+)*@(?:" + kLabel + "\\.)+[A-Za-z]{2,63}", 64};
  if (format == "uri") return FormatSpec{uri(), -1};
  if (format == "uri-reference") return FormatSpec{"(?:" + uri() + "|" + relative_ref() + ")", -1};
  if (format == "json-pointer") return FormatSpec{"(?:/(?:[^~/]|~[01])*)*", -1};
  return std::nullopt;
}

bool known_unsupported_format(std::string_view format) {
  static const char* const kKnown[] = {"duration",      "idn-email",    "idn-hostname", "iri",
                                       "iri-reference", "uri-template", "relative-json-pointer", "regex"};
  for (const char* known : kKnown)
    if (format == known) return true;
  return false;
}

}  // namespace deepinfer::grammar::schema

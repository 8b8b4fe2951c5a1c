#pragma once
// Internal to the JSON schema compiler (json_schema_*.cpp): exact decimals for numeric bounds,
// automata for bounded numbers, and the string formats.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "grammar/json_schema_dfa.h"

namespace deepinfer::grammar::schema {

// An exact decimal: sign, integer digits (no leading zeros; "0" for zero) and fraction digits
// (no trailing zeros). Zero is never negative.
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;

  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
  bool is_integer() const { return frac_digits.empty(); }
  std::string to_string() const;
};

int compare(const Decimal& a, const Decimal& b);
// A JSON number's text (exponents included); nullopt when it is not one.
std::optional<Decimal> parse_decimal(std::string_view text);
// What a double means as a bound: its shortest round-trip decimal (which a validator's float
// comparison agrees with), or its exact value where integers are not all representable
// (|x| >= 2^53).
Decimal decimal_of_double(double value);
// The smallest integer >= x, the largest <= x.
Decimal ceil_decimal(const Decimal& x);
Decimal floor_decimal(const Decimal& x);
// x + 1 and x - 1 for an integer x.
Decimal add_one(const Decimal& x);
Decimal sub_one(const Decimal& x);

// Number literals without an exponent: -?(0|[1-9][0-9]*)(\.[0-9]+)?, the fraction only when
// !integer_only (or zero_fraction), whose exact value lies in [lower, upper] (either may be absent), that are a
// multiple of `multiple` when it is > 0 (integers only), and whose integer part has at most
// max_int_digits digits when that is > 0.
struct NumberSpec {
  bool integer_only = false;
  std::optional<Decimal> lower, upper;
  int64_t multiple = 0;
  int32_t max_int_digits = 0;
  bool fraction_required = false;  // only literals with a nonzero fraction digit (non-integers)
  // With integer_only: also n.0, n.00, ... where n has at most 15 digits (a validator reads it as
  // a double, exact below 2^53).
  bool zero_fraction = false;
};
Dfa number_dfa(const NumberSpec& spec, const DfaLimits& limits);

// A format this compiler enforces (date-time, date, time, uuid, email, ipv4, ipv6, hostname, uri,
// uri-reference, json-pointer): an anchored regular expression (read by regex_dfa) and a length
// bound in code points (-1: none). nullopt for any other name.
struct FormatSpec {
  std::string regex;
  int64_t max_length = -1;
};
std::optional<FormatSpec> format_spec(std::string_view format);
// A format the JSON Schema specification defines that format_regex does not enforce (refused
// unless lenient); other names are unknown and, as validators do, ignored.
bool known_unsupported_format(std::string_view format);

}  // namespace deepinfer::grammar::schema

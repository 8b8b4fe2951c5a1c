// Exact decimals and the automata for bounded numbers (json_schema_internal.h).
//
// Bounds are compared exactly with the literal's digits. A validator compares floats: it parses
// the instance to a double and compares that with the bound's double. Rounding is monotone, so an
// inclusive bound taken as the shortest decimal that round-trips to the bound's double agrees
// with it wherever the grammar accepts (x <= b exactly implies double(x) <= double(b)). An
// exclusive bound is where they can disagree (x < b exactly, yet double(x) == b), so the
// compiler turns x < b into x <= the next double below b, which is safe the same way.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "grammar/json_schema_internal.h"

namespace deepinfer::grammar::schema {
namespace {

void trim(Decimal& d) {
  std::size_t nz = d.int_digits.find_first_not_of('0');
  d.int_digits = nz == std::string::npos ? "0" : d.int_digits.substr(nz);
  while (!d.frac_digits.empty() && d.frac_digits.back() == '0') d.frac_digits.pop_back();
  if (d.is_zero()) d.negative = false;
}

int compare_magnitude(const Decimal& a, const Decimal& b) {
  if (a.int_digits.size() != b.int_digits.size()) return a.int_digits.size() < b.int_digits.size() ? -1 : 1;
  int c = a.int_digits.compare(b.int_digits);
  if (c != 0) return c < 0 ? -1 : 1;
  c = a.frac_digits.compare(b.frac_digits);  // trimmed: lexicographic order is numeric order
  return c < 0 ? -1 : c > 0 ? 1 : 0;
}

std::string increment(std::string digits) {
  for (std::size_t i = digits.size(); i-- > 0;) {
    if (digits[i] == '9') {
      digits[i] = '0';
    } else {
      ++digits[i];
      return digits;
    }
  }
  return "1" + digits;
}

std::string decrement(std::string digits) {  // digits > 0
  for (std::size_t i = digits.size(); i-- > 0;) {
    if (digits[i] == '0') {
      digits[i] = '9';
    } else {
      --digits[i];
      break;
    }
  }
  std::size_t nz = digits.find_first_not_of('0');
  return nz == std::string::npos ? "0" : digits.substr(nz);
}

int sign_of(int v) { return v < 0 ? -1 : v > 0 ? 1 : 0; }

}  // namespace

std::string Decimal::to_string() const {
  std::string out = negative ? "-" : "";
  out += int_digits;
  if (!frac_digits.empty()) out += "." + frac_digits;
  return out;
}

int compare(const Decimal& a, const Decimal& b) {
  int sa = a.is_zero() ? 0 : a.negative ? -1 : 1;
  int sb = b.is_zero() ? 0 : b.negative ? -1 : 1;
  if (sa != sb) return sa < sb ? -1 : 1;
  if (sa == 0) return 0;
  int m = compare_magnitude(a, b);
  return sa > 0 ? m : -m;
}

std::optional<Decimal> parse_decimal(std::string_view t) {
  std::size_t i = 0;
  bool negative = false;
  if (i < t.size() && t[i] == '-') {
    negative = true;
    ++i;
  }
  auto is_digit = [&](std::size_t at) { return at < t.size() && t[at] >= '0' && t[at] <= '9'; };
  if (!is_digit(i)) return std::nullopt;
  std::string digits;
  while (is_digit(i)) digits += t[i++];
  int64_t int_len = static_cast<int64_t>(digits.size());
  if (i < t.size() && t[i] == '.') {
    ++i;
    if (!is_digit(i)) return std::nullopt;
    while (is_digit(i)) digits += t[i++];
  }
  int64_t exponent = 0;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    bool eneg = false;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) eneg = t[i++] == '-';
    if (!is_digit(i)) return std::nullopt;
    while (is_digit(i)) {
      exponent = exponent * 10 + (t[i++] - '0');
      if (exponent > 100000) return std::nullopt;
    }
    if (eneg) exponent = -exponent;
  }
  if (i != t.size()) return std::nullopt;
  int64_t point = int_len + exponent;
  Decimal d;
  d.negative = negative;
  const int64_t n = static_cast<int64_t>(digits.size());
  if (point <= 0) {
    d.int_digits = "0";
    d.frac_digits = std::string(static_cast<std::size_t>(-point), '0') + digits;
  } else if (point >= n) {
    d.int_digits = digits + std::string(static_cast<std::size_t>(point - n), '0');
  } else {
    d.int_digits = digits.substr(0, static_cast<std::size_t>(point));
    d.frac_digits = digits.substr(static_cast<std::size_t>(point));
  }
  trim(d);
  return d;
}

Decimal decimal_of_double(double value) {
  if (std::fabs(value) < 9007199254740992.0) return *parse_decimal(nlohmann::json(value).dump());
  char text[400];
  std::snprintf(text, sizeof text, "%.0f", value);  // integral: glibc prints it exactly
  return *parse_decimal(text);
}

Decimal ceil_decimal(const Decimal& x) {
  if (x.is_integer()) return x;
  Decimal out = x;
  out.frac_digits.clear();
  if (!x.negative) out.int_digits = increment(out.int_digits);
  trim(out);
  return out;
}

Decimal floor_decimal(const Decimal& x) {
  if (x.is_integer()) return x;
  Decimal out = x;
  out.frac_digits.clear();
  if (x.negative) out.int_digits = increment(out.int_digits);
  trim(out);
  return out;
}

Decimal add_one(const Decimal& x) {
  Decimal out = x;
  if (!x.negative) {
    out.int_digits = increment(x.int_digits);
  } else {
    out.int_digits = decrement(x.int_digits);
  }
  trim(out);
  return out;
}

Decimal sub_one(const Decimal& x) {
  Decimal out = x;
  if (x.negative || x.is_zero()) {
    out.negative = true;
    out.int_digits = increment(x.int_digits);
  } else {
    out.int_digits = decrement(x.int_digits);
  }
  trim(out);
  return out;
}

Dfa number_dfa(const NumberSpec& spec, const DfaLimits& limits) {
  struct Bound {
    bool present = false;
    bool negative = false, zero = false;
    std::string i, f;
  };
  auto bound_of = [](const std::optional<Decimal>& d) {
    Bound b;
    if (!d) return b;
    b.present = true;
    b.negative = d->negative;
    b.zero = d->is_zero();
    b.i = d->int_digits;
    b.f = d->frac_digits;
    return b;
  };
  const Bound bounds[2] = {bound_of(spec.lower), bound_of(spec.upper)};
  int32_t cap_i = std::max<int32_t>(spec.max_int_digits, 1);
  int32_t cap_f = 1;
  for (const Bound& b : bounds) {
    cap_i = std::max(cap_i, static_cast<int32_t>(b.i.size()));
    cap_f = std::max(cap_f, static_cast<int32_t>(b.f.size()));
  }
  if (spec.zero_fraction) cap_i = std::max(cap_i, 15);
  ++cap_i;
  ++cap_f;
  // State: phase, negative, nonzero, int length, int cmp (lo, hi), frac length, frac cmp (lo, hi),
  // remainder. Phases: 0 start, 1 after '-', 2 integer digits, 3 integer "0", 4 after '.',
  // 5 fraction digits.
  enum { kPhase, kNeg, kNonzero, kIlen, kIcmp, kFlen = kIcmp + 2, kFcmp, kRem = kFcmp + 2, kFracNonzero, kSize };
  auto int_cmp = [&](const std::vector<int32_t>& s, int b) {
    int32_t len = static_cast<int32_t>(bounds[b].i.size());
    return s[kIlen] < len ? -1 : s[kIlen] > len ? 1 : s[kIcmp + b];
  };
  auto int_digit = [&](std::vector<int32_t>& s, char d) {
    if (spec.max_int_digits > 0 && s[kIlen] + 1 > spec.max_int_digits) return false;
    for (int b = 0; b < 2; ++b) {
      if (!bounds[b].present) continue;
      if (s[kIlen] < static_cast<int32_t>(bounds[b].i.size()) && s[kIcmp + b] == 0)
        s[kIcmp + b] = sign_of(d - bounds[b].i[static_cast<std::size_t>(s[kIlen])]);
    }
    s[kIlen] = std::min(s[kIlen] + 1, cap_i);
    if (d != '0') s[kNonzero] = 1;
    if (spec.multiple > 0) s[kRem] = static_cast<int32_t>((int64_t{s[kRem]} * 10 + (d - '0')) % spec.multiple);
    return true;
  };
  auto step = [&](const std::vector<int32_t>& s, char c, std::vector<int32_t>& out) {
    out = s;
    bool digit = c >= '0' && c <= '9';
    switch (s[kPhase]) {
      case 0:
        if (c == '-') {
          out[kPhase] = 1;
          out[kNeg] = 1;
          return true;
        }
        [[fallthrough]];
      case 1:
        if (!digit) return false;
        out[kPhase] = c == '0' ? 3 : 2;
        return int_digit(out, c);
      case 2:
        if (digit) return int_digit(out, c);
        [[fallthrough]];
      case 3:
        if (c != '.') return false;
        if (spec.integer_only && !(spec.zero_fraction && s[kIlen] <= 15)) return false;
        for (int b = 0; b < 2; ++b) out[kIcmp + b] = bounds[b].present ? int_cmp(s, b) : 0;
        out[kIlen] = 0;
        out[kPhase] = 4;
        return true;
      case 4:
      case 5:
        if (!digit || (spec.integer_only && c != '0')) return false;
        for (int b = 0; b < 2; ++b) {
          if (!bounds[b].present || out[kIcmp + b] != 0 || out[kFcmp + b] != 0) continue;
          char bd = s[kFlen] < static_cast<int32_t>(bounds[b].f.size()) ? bounds[b].f[static_cast<std::size_t>(s[kFlen])] : '0';
          out[kFcmp + b] = sign_of(c - bd);
        }
        out[kFlen] = std::min(s[kFlen] + 1, cap_f);
        if (c != '0') out[kNonzero] = out[kFracNonzero] = 1;
        out[kPhase] = 5;
        return true;
      default: return false;
    }
  };
  auto magnitude_cmp = [&](const std::vector<int32_t>& s, int b) {
    if (s[kPhase] == 5) {
      if (s[kIcmp + b] != 0) return s[kIcmp + b];
      if (s[kFcmp + b] != 0) return s[kFcmp + b];
      return s[kFlen] < static_cast<int32_t>(bounds[b].f.size()) ? -1 : 0;
    }
    int ic = int_cmp(s, b);
    if (ic != 0) return ic;
    return bounds[b].f.empty() ? 0 : -1;
  };
  auto value_cmp = [&](const std::vector<int32_t>& s, int b) {
    int sx = !s[kNonzero] ? 0 : s[kNeg] ? -1 : 1;
    int sb = bounds[b].zero ? 0 : bounds[b].negative ? -1 : 1;
    if (sx != sb) return sx < sb ? -1 : 1;
    if (sx == 0) return 0;
    int m = magnitude_cmp(s, b);
    return sx > 0 ? m : -m;
  };
  auto accept = [&](const std::vector<int32_t>& s) {
    int phase = s[kPhase];
    if (phase != 2 && phase != 3 && phase != 5) return false;
    if (spec.multiple > 0 && s[kRem] != 0) return false;
    if (spec.fraction_required && !s[kFracNonzero]) return false;
    if (bounds[0].present && value_cmp(s, 0) < 0) return false;
    if (bounds[1].present && value_cmp(s, 1) > 0) return false;
    return true;
  };
  std::vector<int32_t> start(kSize, 0);
  return minimize(build_dfa(start, "-.0123456789", step, accept, limits));
}

}  // namespace deepinfer::grammar::schema

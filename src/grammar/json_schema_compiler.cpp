// JSON Schema to a byte grammar (compile.h): compile_json_schema and any_json.
//
// The grammar accepts only JSON texts whose value the schema accepts, and every valid one but a
// documented set of rare forms (below). "Accepts" means: for every validator in common use,
// which read some keywords differently (ECMAScript or Python regexes, drafts, formats checked or
// not). So each keyword has a narrow reading (what every validator accepts), which the grammar
// takes, and a wide one (what some validator may accept), which negation and oneOf need: `not P`
// excludes every string some dialect matches, and oneOf is a union only where no value may
// satisfy two branches.
//
// The schema is read in three steps:
//   1. build: every schema object reached becomes a node: its own keywords as one "simple"
//      conjunction (types, string / number / array / object constraints, enum), with allOf,
//      anyOf, oneOf, not and $ref as AND / OR / ONEOF / negated / REF nodes. Nothing is expanded,
//      so recursive schemas stay finite. Keywords are those of the draft $schema names (one a
//      draft lacks is an unknown word, ignored as its validators do); without $schema, 2020-12's,
//      plus draft 4's array-valued items / additionalItems.
//   2. flatten (on demand, memoized): a node as a union of simples (disjunctive normal form).
//      allOf members merge keyword by keyword; a property both members constrain becomes an AND
//      node of the two, flattened only when emitted. oneOf is a union where its branches are
//      provably disjoint (types, const / enum values, numeric ranges, strings no common string
//      matches, a required property with disjoint schemas), else exactly one branch: branch i
//      and the negation of the others, where those negate (not (A and B) = not A or not B, each
//      keyword's complement a simple); otherwise refused. Lenient, overlapping branches are read
//      as anyOf.
//   3. emit: one rule per node (so $ref recursion is rule recursion); per simple, one
//      alternative per type it allows. Strings with pattern / format / length bounds, property
//      names, and bounded numbers go through automata (json_schema_dfa.h).
//
// Objects: a pair for every listed property (in `properties`, or only in `required`: its value
// schema then comes from patternProperties / additionalProperties), and one pair class per
// region of the other keys: the keys each combination of patternProperties regexes may match
// and no listed name is, and the keys nothing matches (additionalProperties). Pairs come in any
// order while 2^(required count) * pair kinds stays small (4096 alternatives); past that the
// required properties come in schema order with the optional ones anywhere among them. A listed
// property comes at most once while 2^(listed count) * pair kinds is as small; past that, and for
// the keys of patternProperties / additionalProperties, a key may repeat (every occurrence is
// validated, so whichever one a parser keeps is valid).
//
// Valid forms the grammar does not accept (over-constraint, by design):
//   - whitespace runs longer than options.max_whitespace;
//   - numbers with an exponent where numeric bounds apply (1e2 for maximum 500), integers
//     written 1e2 (or 1.0 in draft 4, or n.0 with more than 15 digits where bounds apply);
//   - inside strings constrained by pattern / format / enum / const, and in keys where names
//     are restricted: \uXXXX escapes of characters other than control characters (write them
//     raw);
//   - enum / const values: numbers other than their shortest form (or n / n.0 for integral
//     ones), objects with more than 3 keys in an order other than the schema's;
//   - formats: see json_schema_strings.cpp; patterns: the narrower regex reading (ASCII \d \w,
//     see json_schema_dfa.cpp); a maxLength above limits.max_repeat counts as max_repeat, and one
//     that with a pattern / format needs too many automaton states is lowered (4096, 1024, 256);
//   - with many required properties (above), required properties out of schema order;
//   - keywords of another draft than the declared one are not enforced, as validators do.
// Refused (CompileError with the keyword's JSON pointer; with options.lenient, or the root's
// "x-guidance": {"lenient": true}, not enforced and listed in Grammar::relaxations): not
// of what cannot be negated (items, contains, formats, multipleOf, ...), if/then/else,
// uniqueItems: true (unless maxItems <= 1), contains, propertyNames, unevaluatedProperties /
// unevaluatedItems beside applicators, $dynamicRef / $recursiveRef, remote $ref, multipleOf that
// is not an integer (validators divide in floating point), overlapping oneOf branches that
// cannot be negated, minProperties above the number of required properties (except 1), the
// formats the spec defines that json_schema_strings.cpp does not, patterns with lookaround /
// backreferences / \b, draft-3 keywords. Unknown keywords and formats are annotations.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "grammar/compile.h"
#include "grammar/compile_util.h"
#include "grammar/json_schema_dfa.h"
#include "grammar/json_schema_internal.h"

namespace deepinfer::grammar {
namespace {

using ojson = nlohmann::ordered_json;
using schema::Decimal;
using schema::Dfa;
using schema::DfaEncoding;
using schema::DfaError;
using schema::DfaLimits;

using NodeId = int32_t;
constexpr NodeId kAbsent = -1;
constexpr NodeId kTrue = 0;
constexpr NodeId kFalse = 1;

enum : uint32_t {
  kNull = 1,
  kBool = 2,
  kObject = 4,
  kArray = 8,
  kString = 16,
  kInt = 32,   // numbers with an integer value
  kFrac = 64,  // other numbers
  kNumber = kInt | kFrac,
  kAllTypes = 127,
};

constexpr std::size_t kMaxAlternatives = 256;    // a node's union of simples
constexpr int64_t kAnyOrderBudget = 4096;        // alternatives of an any-order object
constexpr int64_t kObjectStateBudget = 1 << 16;  // alternatives of any object
constexpr int64_t kMaxMultiple = 10000;          // multipleOf as remainder states
constexpr int64_t kStringStateBudget = 1 << 14;  // a string's automaton, before its length is lowered

std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string child(const std::string& where, std::string_view key) { return where + "/" + pointer_token(key); }

// The options a schema carries in its root's "x-guidance" (llguidance's convention, an
// annotation to validators, so a schema sent through any endpoint, tool schemas included, can
// carry them): `lenient` and `whitespace_flexible`. Any other key is refused, not ignored.
JsonSchemaOptions with_schema_options(const ojson& root, JsonSchemaOptions options) {
  if (!root.is_object()) return options;
  const auto found = root.find("x-guidance");
  if (found == root.end()) return options;
  if (!found->is_object()) throw CompileError("/x-guidance", "must be an object");
  for (const auto& [key, value] : found->items()) {
    const std::string where = child("/x-guidance", key);
    if (key != "lenient" && key != "whitespace_flexible")
      throw CompileError(where, "unknown option (x-guidance options read here: lenient, whitespace_flexible)");
    if (!value.is_boolean()) throw CompileError(where, "must be true or false");
    if (key == "lenient") {
      options.lenient = options.lenient || value.get<bool>();
    } else if (!value.get<bool>()) {
      options.max_whitespace = 0;  // compact JSON
    }
  }
  return options;
}

struct NumBound {
  ojson value;  // a number
  bool exclusive = false;
};

// One conjunction of keywords.
struct Simple {
  uint32_t types = kAllTypes;
  bool has_enum = false;
  std::vector<ojson> enum_values;
  // strings
  int64_t min_length = 0, max_length = -1;
  std::vector<std::string> patterns, not_patterns, formats;
  std::vector<std::string> not_words;  // strings that are excluded (not: {enum: [...]})
  // numbers
  std::vector<NumBound> lower, upper;
  std::vector<ojson> multiples;
  // arrays
  std::vector<NodeId> prefix;
  NodeId items = kAbsent;
  int64_t min_items = 0, max_items = -1;
  // objects
  std::vector<std::pair<std::string, NodeId>> properties;
  std::vector<std::string> required, forbidden;
  std::vector<std::pair<std::string, NodeId>> pattern_properties;
  NodeId additional = kAbsent;
  int64_t min_properties = 0, max_properties = -1;
  // Numeric bounds two drafts read differently (a boolean exclusiveMaximum): both readings are
  // enforced, and oneOf cannot rely on them.
  bool ambiguous_bounds = false;
  std::string where;

  bool has_string_constraints() const {
    return min_length > 0 || max_length >= 0 || !patterns.empty() || !not_patterns.empty() || !formats.empty() ||
           !not_words.empty();
  }
  bool has_number_constraints() const { return !lower.empty() || !upper.empty() || !multiples.empty(); }
  bool has_array_constraints() const {
    return !prefix.empty() || (items != kAbsent && items != kTrue) || min_items > 0 || max_items >= 0;
  }
  bool has_object_constraints() const {
    return !properties.empty() || !required.empty() || !forbidden.empty() || !pattern_properties.empty() ||
           (additional != kAbsent && additional != kTrue) || min_properties > 0 || max_properties >= 0;
  }
};

struct Node {
  enum Kind { kSimple, kAnd, kOr, kOneOf, kRef };
  Kind kind = kSimple;
  Simple simple;
  std::vector<NodeId> kids;
  std::string ref;
  int32_t resource = 0;
  std::string where;
  NodeId target = kAbsent;  // kRef, once resolved
  std::vector<const ojson*> branches;  // kOneOf: the branch schemas (negated when they overlap)
};

// A schema resource: the root, or a subschema with its own $id; refs inside resolve against it.
struct Resource {
  const ojson* schema;
  std::string pointer;
  std::string base;  // its URI without fragment ("" when unknown)
};

bool has_scheme(std::string_view uri) {
  if (uri.empty() || !std::isalpha(static_cast<unsigned char>(uri[0]))) return false;
  for (char c : uri.substr(1)) {
    if (c == ':') return true;
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') return false;
  }
  return false;
}

// Splits a URI into its scheme and authority ("http://host") and its path.
std::pair<std::string, std::string> split_uri(const std::string& uri) {
  if (!has_scheme(uri)) return {"", uri};
  std::size_t p = uri.find(':') + 1;
  if (uri.compare(p, 2, "//") == 0) {
    std::size_t slash = uri.find('/', p + 2);
    p = slash == std::string::npos ? uri.size() : slash;
  }
  return {uri.substr(0, p), uri.substr(p)};
}

std::string remove_dot_segments(const std::string& path) {
  std::vector<std::string> segments;
  std::size_t pos = 0;
  while (true) {
    std::size_t next = path.find('/', pos);
    std::string seg = path.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    if (seg == "..") {
      if (segments.size() > 1) segments.pop_back();
    } else if (seg != ".") {
      segments.push_back(seg);
    }
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  std::string out;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (i > 0) out += '/';
    out += segments[i];
  }
  return out;
}

// RFC 3986 reference resolution, enough for $id / $ref (no query strings).
std::string resolve_uri(const std::string& base, const std::string& ref) {
  if (ref.empty()) return base;
  if (has_scheme(ref) || base.empty()) {
    auto [prefix, path] = split_uri(ref);
    return prefix + remove_dot_segments(path);
  }
  auto [prefix, path] = split_uri(base);
  if (ref.compare(0, 2, "//") == 0) {
    auto [p, rest] = split_uri(prefix.substr(0, prefix.find(':') + 1) + ref);
    return p + remove_dot_segments(rest);
  }
  if (ref[0] == '/') return prefix + remove_dot_segments(ref);
  std::size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? (prefix.find("//") != std::string::npos ? "/" : "") : path.substr(0, slash + 1);
  return prefix + remove_dot_segments(dir + ref);
}

// JSON values as validators compare them: numbers by value, objects without order.
bool json_equal(const ojson& a, const ojson& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_number_float() || b.is_number_float()) return a.get<double>() == b.get<double>();
    return a == b;
  }
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto jt = b.find(it.key());
      if (jt == b.end() || !json_equal(it.value(), *jt)) return false;
    }
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!json_equal(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

bool integral_number(const ojson& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return true;
  if (!v.is_number_float()) return false;
  double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

Decimal decimal_of(const ojson& v) {
  if (v.is_number_float()) return schema::decimal_of_double(v.get<double>());
  return *schema::parse_decimal(v.dump());
}

class Compiler {
 public:
  Compiler(const ojson& root, const JsonSchemaOptions& options, const CompileLimits& limits)
      : root_(root), options_(with_schema_options(root, options)), limits_(limits) {
    dfa_limits_.max_states = std::min<int64_t>(int64_t{1} << 16, limits.max_symbols / 4 + 64);
    dfa_limits_.max_repeat = limits.max_repeat;
    dfa_limits_.max_depth = limits.max_depth;
    dfa_limits_.max_bytes = limits.max_bytes;
    dfa_limits_.deadline = limits.deadline;
    Node t;
    t.where = "";
    nodes_.push_back(t);  // kTrue: no constraint
    Node f;
    f.simple.types = 0;
    nodes_.push_back(f);  // kFalse
    if (root.is_object()) {
      auto it = root.find("$schema");
      if (it != root.end() && it->is_string()) {
        const std::string& s = it->get_ref<const std::string&>();
        if (s.find("draft-03") != std::string::npos) draft_ = 3;
        else if (s.find("draft-04") != std::string::npos) draft_ = 4;
        else if (s.find("draft-06") != std::string::npos) draft_ = 6;
        else if (s.find("draft-07") != std::string::npos) draft_ = 7;
        else if (s.find("2019-09") != std::string::npos) draft_ = 2019;
        else if (s.find("2020-12") != std::string::npos) draft_ = 2020;
      }
    }
    resources_.push_back({&root, "", ""});
    resource_of_[&root] = 0;
    collect_ids(root, "", 0, 0);
  }

  Grammar compile() {
    NodeId root = build(root_, "", 0, 0);
    RuleId value = emit(root);
    if (empty_rules_.count(value)) throw CompileError("", "the schema accepts no JSON value");
    return finish(value);
  }

  Grammar any(bool object_only) {
    RuleId value = object_only ? any_object() : any_value();
    return finish(value);
  }

  // The subschema's string values as raw bytes, none containing options_.excluded_text; none
  // when there is no such string (compile_json_schema_split).
  std::optional<Grammar> raw_strings(const std::string& pointer) {
    const NodeId id = build(subschema(pointer), pointer, 0, 0);
    if (id == kFalse) return std::nullopt;
    const std::string name = pointer.empty() ? "raw" : pointer;
    const RuleId start = g_.add_rule(name);
    // Strings bounded by a length alone (or by nothing) go through a chain of counts (an
    // automaton with a long length bound is too large); the others through one automaton.
    Dfa automaton = Dfa::nothing();
    for (const Simple& s : flatten(id, 0)) {
      if (!(s.types & kString)) continue;
      if (s.has_enum) {
        std::vector<std::string> words;
        for (const ojson& v : s.enum_values)
          if (v.is_string() && validate_simple(v, s, 0)) words.push_back(v.get<std::string>());
        if (!words.empty())
          automaton = with_dfa(s.where, [&] { return schema::unite(automaton, schema::words_dfa(words), dfa_limits_); });
      } else if (length_only(s)) {
        check_repeat(s.min_length, child(s.where, "minLength"));
        const int64_t max = capped(s.max_length);
        if (max < 0 || max >= s.min_length)
          g_.add_alternative(start, {Grammar::rule(guarded_body(s.min_length, max, /*json=*/false))});
      } else {
        automaton = with_dfa(s.where, [&] {
          return schema::unite(automaton, s.has_string_constraints() ? string_dfa(s) : schema::utf8_dfa(), dfa_limits_);
        });
      }
      check_size(s.where);
    }
    if (!options_.excluded_text.empty())
      automaton = with_dfa(pointer, [&] { return schema::intersect(automaton, text_allowed(), dfa_limits_); });
    if (!automaton.empty())
      g_.add_alternative(start, {Grammar::rule(schema::emit_dfa(g_, automaton, DfaEncoding::raw, {}, name))});
    if (g_.alternatives(start).empty()) return std::nullopt;
    g_.set_start(start);
    check_size(pointer);
    g_.validate();
    return std::move(g_);
  }

  // The JSON texts of the subschema's values that are not strings; none when there are none.
  std::optional<Grammar> non_strings(const std::string& pointer) {
    const NodeId id = build(subschema(pointer), pointer, 0, 0);
    if (id == kFalse) return std::nullopt;
    const RuleId r = g_.add_rule(pointer.empty() ? "value" : pointer);
    for (Simple s : flatten(id, 0)) {
      s.types &= ~static_cast<uint32_t>(kString);
      if (s.types == 0) continue;
      if (s.has_enum) std::erase_if(s.enum_values, [](const ojson& v) { return v.is_string(); });
      for (Sequence& alt : emit_simple(s)) g_.add_alternative(r, std::move(alt));
      check_size(s.where);
    }
    if (g_.alternatives(r).empty()) return std::nullopt;
    g_.set_start(r);
    check_size(pointer);
    g_.validate();
    return std::move(g_);
  }

 private:
  Grammar finish(RuleId value) {
    RuleId start = g_.add_rule("root");
    g_.add_alternative(start, {ws(), Grammar::rule(value), ws()});
    g_.set_start(start);
    check_size("");
    g_.validate();
    return std::move(g_);
  }

  const ojson& subschema(const std::string& pointer) {
    try {
      return root_.at(ojson::json_pointer(pointer));
    } catch (const nlohmann::json::exception&) {
      throw CompileError(pointer, "no subschema at this JSON pointer");
    }
  }

  // ---- errors and limits ------------------------------------------------------------------

  void unsupported(const std::string& where, const std::string& what) {
    if (!options_.lenient)
      throw CompileError(where, what + " is not supported (with \"x-guidance\": {\"lenient\": true} at the "
                                       "schema's root it is not enforced, and said so)");
    g_.add_relaxation({{}, where, what + " is not enforced (lenient)"});
  }
  [[noreturn]] void invalid(const std::string& where, const std::string& why) { throw CompileError(where, why); }
  void check_size(const std::string& where) {
    limits_.check_deadline();
    if (g_.size() > limits_.max_symbols) throw CompileError(where, "the grammar exceeds limits.max_symbols");
    if (g_.bytes() > limits_.max_bytes) throw CompileError(where, "the grammar exceeds limits.max_bytes");
  }
  void check_repeat(int64_t count, const std::string& where) {
    if (count > limits_.max_repeat) throw CompileError(where, "a count above limits.max_repeat");
  }
  // An upper bound above limits.max_repeat is read as max_repeat: it rejects only longer values.
  int64_t capped(int64_t max) const { return max > limits_.max_repeat ? limits_.max_repeat : max; }
  template <typename F>
  auto with_dfa(const std::string& where, F f) -> decltype(f()) {
    try {
      return f();
    } catch (const DfaError& e) {
      throw CompileError(where, e.what());
    }
  }

  // ---- $id and anchors --------------------------------------------------------------------

  void collect_ids(const ojson& s, const std::string& ptr, int32_t resource, int depth) {
    if (depth > limits_.max_depth) return;
    if (s.is_object()) {
      // Drafts 3 and 4 spell it "id"; later ones "$id" ("id" is then a word like any other).
      auto id_it = s.find(draft_ == 3 || draft_ == 4 ? "id" : "$id");
      if (id_it != s.end() && id_it->is_string() && !id_it->get_ref<const std::string&>().empty()) {
        const std::string& id = id_it->get_ref<const std::string&>();
        std::size_t hash = id.find('#');
        std::string uri = id.substr(0, hash);
        if (hash != std::string::npos && hash + 1 < id.size()) anchors_[id.substr(hash + 1)].push_back({&s, ptr, resource});
        if (!uri.empty()) {
          std::string base = resolve_uri(resources_[static_cast<std::size_t>(resource)].base, uri);
          if (&s != &root_) {
            resource = static_cast<int32_t>(resources_.size());
            resources_.push_back({&s, ptr, base});
            resource_of_[&s] = resource;
          } else {
            resources_[0].base = base;
          }
          ids_[base].push_back(resource);
        }
      }
      auto anchor = s.find("$anchor");
      if (anchor != s.end() && anchor->is_string()) anchors_[anchor->get<std::string>()].push_back({&s, ptr, resource});
      for (auto it = s.begin(); it != s.end(); ++it) {
        const std::string& key = it.key();
        if (key == "enum" || key == "const" || key == "default" || key == "examples" || key == "example") continue;
        if (it->is_object() || it->is_array()) collect_ids(*it, child(ptr, key), resource, depth + 1);
      }
    } else if (s.is_array()) {
      for (std::size_t i = 0; i < s.size(); ++i)
        if (s[i].is_object() || s[i].is_array()) collect_ids(s[i], child(ptr, std::to_string(i)), resource, depth + 1);
    }
  }

  struct Anchor {
    const ojson* schema;
    std::string pointer;
    int32_t resource;
  };

  static std::string percent_decode(std::string_view text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i) {
      auto hex = [](char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      };
      if (text[i] == '%' && i + 2 < text.size() + 0 && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
        out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
        i += 2;
      } else {
        out += text[i];
      }
    }
    return out;
  }

  // The schema a $ref names: (schema, pointer, resource).
  Anchor resolve_ref(const std::string& ref, int32_t resource, const std::string& where) {
    std::size_t hash = ref.find('#');
    std::string uri = ref.substr(0, hash);
    std::string fragment = hash == std::string::npos ? "" : percent_decode(ref.substr(hash + 1));
    if (!uri.empty()) {
      std::string target = resolve_uri(resources_[static_cast<std::size_t>(resource)].base, uri);
      auto it = ids_.find(target);
      if (it == ids_.end() || it->second.size() != 1) {
        unsupported(where, "the remote $ref \"" + ref + "\"");
        return {&kTrueSchema(), where, 0};
      }
      resource = it->second[0];
    }
    const Resource& res = resources_[static_cast<std::size_t>(resource)];
    if (fragment.empty()) return {res.schema, res.pointer, resource};
    if (fragment[0] != '/') {
      auto it = anchors_.find(fragment);
      if (it == anchors_.end() || it->second.size() != 1) invalid(where, "the $ref \"" + ref + "\" does not resolve");
      return it->second[0];
    }
    const ojson* cur = res.schema;
    std::string ptr = res.pointer;
    std::size_t pos = 1;
    while (true) {
      std::size_t end = fragment.find('/', pos);
      std::string token = fragment.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      std::string key;
      for (std::size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
          key += token[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += token[i];
        }
      }
      if (cur->is_object()) {
        auto it = cur->find(key);
        if (it == cur->end()) invalid(where, "the $ref \"" + ref + "\" does not resolve");
        cur = &*it;
      } else if (cur->is_array()) {
        std::size_t index = 0;
        bool digits = !key.empty() && key.size() < 10;
        for (char c : key) digits = digits && c >= '0' && c <= '9';
        if (digits) index = std::stoul(key);
        if (!digits || index >= cur->size()) invalid(where, "the $ref \"" + ref + "\" does not resolve");
        cur = &(*cur)[index];
      } else {
        invalid(where, "the $ref \"" + ref + "\" does not resolve");
      }
      ptr = child(ptr, key);
      auto r = resource_of_.find(cur);
      if (r != resource_of_.end()) resource = r->second;
      if (end == std::string::npos) break;
      pos = end + 1;
    }
    return {cur, ptr, resource};
  }

  static const ojson& kTrueSchema() {
    static const ojson t = true;
    return t;
  }

  // ---- build ------------------------------------------------------------------------------

  NodeId add_node(Node node) {
    nodes_.push_back(std::move(node));
    return static_cast<NodeId>(nodes_.size()) - 1;
  }

  static uint32_t type_mask(const std::string& name) {
    if (name == "null") return kNull;
    if (name == "boolean") return kBool;
    if (name == "object") return kObject;
    if (name == "array") return kArray;
    if (name == "string") return kString;
    if (name == "integer") return kInt;
    if (name == "number") return kNumber;
    return 0;
  }

  uint32_t types_of(const ojson& value, const std::string& where) {
    uint32_t mask = 0;
    auto one = [&](const ojson& t) {
      if (!t.is_string()) invalid(where, "a type must be a string");
      uint32_t m = type_mask(t.get<std::string>());
      if (m == 0) invalid(where, "unknown type \"" + t.get<std::string>() + "\"");
      mask |= m;
    };
    if (value.is_array()) {
      for (const ojson& t : value) one(t);
    } else {
      one(value);
    }
    return mask;
  }

  int64_t count_of(const ojson& value, const std::string& where) {
    constexpr int64_t kHuge = int64_t{1} << 40;  // beyond every limit
    if (value.is_number_unsigned()) return value.get<uint64_t>() > static_cast<uint64_t>(kHuge) ? kHuge : value.get<int64_t>();
    if (value.is_number_integer() && value.get<int64_t>() >= 0) return std::min(value.get<int64_t>(), kHuge);
    if (value.is_number_float() && integral_number(value) && value.get<double>() >= 0)
      return value.get<double>() > 1e12 ? int64_t{1} << 40 : static_cast<int64_t>(value.get<double>());
    invalid(where, "must be a non-negative integer");
  }

  // A minLength / minItems / minProperties keyword: bounds of one schema intersect, so the
  // largest minimum holds.
  void raise_minimum(int64_t& minimum, const ojson& value, const std::string& where) {
    minimum = std::max(minimum, count_of(value, where));
  }
  // A maxLength / maxItems / maxProperties keyword: the smallest maximum holds (-1: none yet).
  void lower_maximum(int64_t& maximum, const ojson& value, const std::string& where) {
    const int64_t n = count_of(value, where);
    maximum = maximum < 0 ? n : std::min(maximum, n);
  }

  static void intersect_enum(Simple& s, std::vector<ojson> values) {
    if (!s.has_enum) {
      s.has_enum = true;
      s.enum_values = std::move(values);
      return;
    }
    std::vector<ojson> kept;
    for (const ojson& v : s.enum_values)
      for (const ojson& w : values)
        if (json_equal(v, w)) {
          kept.push_back(v);
          break;
        }
    s.enum_values = std::move(kept);
  }

  static bool is_annotation_only(const ojson& s, const std::set<std::string>& allowed) {
    static const std::set<std::string> kAnnotations = {"title", "description", "$comment", "examples", "default",
                                                       "deprecated", "readOnly", "writeOnly", "$id", "id"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!allowed.count(it.key()) && !kAnnotations.count(it.key())) return false;
    return true;
  }

  // Whether the pattern compiles (both readings); a pattern that does not is refused, or with
  // options.lenient ignored.
  bool pattern_ok(const std::string& pattern, const std::string& where) {
    try {
      pattern_dfa(pattern, where, false);
      pattern_dfa(pattern, where, true);
      return true;
    } catch (const CompileError& error) {
      if (!options_.lenient) throw;
      std::string_view reason = error.what();
      if (reason.starts_with(error.where() + ": ")) reason.remove_prefix(error.where().size() + 2);
      g_.add_relaxation({{}, where, "the pattern is not enforced (lenient): " + std::string(reason)});
      return false;
    }
  }

  // Whether the schema's draft has this keyword. A keyword of another draft is, to that draft's
  // validators, an unknown word: ignored, as here (enforcing it would be wrong under not / oneOf).
  bool in_vocabulary(const std::string& key) const {
    const bool old = draft_ >= 3 && draft_ <= 7;
    if (key == "const" || key == "contains" || key == "propertyNames") return draft_ != 3 && draft_ != 4;
    if (key == "if" || key == "then" || key == "else") return !old || draft_ == 7;
    // A schema that names no draft gets every reading (as for draft 4's boolean exclusiveMaximum
    // below): draft 7 validators such as ajv's default enforce `dependencies`, later ones ignore
    // it, so it is enforced.
    if (key == "dependencies") return old || draft_ == 0;
    if (key == "dependentRequired" || key == "dependentSchemas" || key == "unevaluatedProperties" ||
        key == "unevaluatedItems")
      return !old;
    if (key == "prefixItems" || key == "$dynamicRef") return draft_ == 0 || draft_ == 2020;
    if (key == "$recursiveRef") return draft_ == 2019;
    if (key == "additionalItems") return draft_ != 2020;
    if (key == "extends" || key == "disallow" || key == "divisibleBy") return draft_ == 3;
    return true;
  }

  NodeId build(const ojson& s, const std::string& ptr, int32_t resource, int depth) {
    if (depth > limits_.max_depth) throw CompileError(ptr, "the schema nests deeper than limits.max_depth");
    if (s.is_boolean()) return s.get<bool>() ? kTrue : kFalse;
    if (!s.is_object()) invalid(ptr, "a schema must be an object or a boolean");
    auto memo = built_.find(&s);
    if (memo != built_.end()) return memo->second;
    auto res = resource_of_.find(&s);
    if (res != resource_of_.end()) resource = res->second;

    Simple simple;
    simple.where = ptr;
    std::vector<NodeId> conj;
    auto sub = [&](const ojson& v, const std::string& where) { return build(v, where, resource, depth + 1); };

    auto ref = s.find("$ref");
    if (ref != s.end()) {
      if (!ref->is_string()) invalid(child(ptr, "$ref"), "$ref must be a string");
      Node node;
      node.kind = Node::kRef;
      node.ref = ref->get<std::string>();
      node.resource = resource;
      node.where = child(ptr, "$ref");
      NodeId id = add_node(std::move(node));
      // Drafts 4 to 7: $ref replaces its siblings. Later drafts (and schemas that do not say)
      // apply both.
      if (draft_ >= 3 && draft_ <= 7) {
        built_[&s] = id;
        return id;
      }
      conj.push_back(id);
    }

    bool applicators = s.contains("allOf") || s.contains("anyOf") || s.contains("oneOf") || s.contains("$ref") ||
                       s.contains("not") || s.contains("if") || s.contains("dependentSchemas") ||
                       s.contains("dependencies");
    const ojson* exclusive_min_bool = nullptr;
    const ojson* exclusive_max_bool = nullptr;
    bool tuple_items = false;
    const ojson* additional_items = nullptr;
    bool unique_items = false;

    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& key = it.key();
      const ojson& v = it.value();
      const std::string where = child(ptr, key);
      if (!in_vocabulary(key)) continue;
      if (key == "type") {
        simple.types &= types_of(v, where);
      } else if (key == "enum") {
        if (!v.is_array()) invalid(where, "enum must be an array");
        intersect_enum(simple, std::vector<ojson>(v.begin(), v.end()));
      } else if (key == "const") {
        intersect_enum(simple, {v});
      } else if (key == "minLength") {
        raise_minimum(simple.min_length, v, where);
      } else if (key == "maxLength") {
        lower_maximum(simple.max_length, v, where);
      } else if (key == "pattern") {
        if (!v.is_string()) invalid(where, "pattern must be a string");
        if (pattern_ok(v.get<std::string>(), where)) simple.patterns.push_back(v.get<std::string>());
      } else if (key == "format") {
        if (!v.is_string()) continue;
        const std::string& f = v.get_ref<const std::string&>();
        if (schema::format_spec(f)) {
          simple.formats.push_back(f);
        } else if (schema::known_unsupported_format(f)) {
          unsupported(where, "the format \"" + f + "\"");
        }
      } else if (key == "minimum" || key == "maximum") {
        if (!v.is_number() || !std::isfinite(v.get<double>())) invalid(where, key + " must be a finite number");
        (key == "minimum" ? simple.lower : simple.upper).push_back({v, false});
      } else if (key == "exclusiveMinimum" || key == "exclusiveMaximum") {
        if (v.is_boolean() || draft_ == 3 || draft_ == 4) {
          (key == "exclusiveMinimum" ? exclusive_min_bool : exclusive_max_bool) = &v;
        } else if (v.is_number() && std::isfinite(v.get<double>())) {
          (key == "exclusiveMinimum" ? simple.lower : simple.upper).push_back({v, true});
        } else {
          invalid(where, key + " must be a number");
        }
      } else if (key == "multipleOf") {
        if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
          invalid(where, "multipleOf must be a finite number above 0");
        simple.multiples.push_back(v);
      } else if (key == "items") {
        if (v.is_array() && draft_ == 2020) invalid(where, "items must be a schema in draft 2020-12 (see prefixItems)");
        if (v.is_array()) {
          tuple_items = true;
          for (std::size_t i = 0; i < v.size(); ++i) simple.prefix.push_back(sub(v[i], child(where, std::to_string(i))));
        } else {
          simple.items = sub(v, where);
        }
      } else if (key == "prefixItems") {
        if (!v.is_array()) invalid(where, "prefixItems must be an array");
        simple.prefix.clear();
        for (std::size_t i = 0; i < v.size(); ++i) simple.prefix.push_back(sub(v[i], child(where, std::to_string(i))));
      } else if (key == "additionalItems") {
        additional_items = &v;
      } else if (key == "minItems") {
        raise_minimum(simple.min_items, v, where);
      } else if (key == "maxItems") {
        lower_maximum(simple.max_items, v, where);
      } else if (key == "uniqueItems") {
        if (v.is_boolean() && v.get<bool>()) unique_items = true;
      } else if (key == "contains") {
        unsupported(where, "contains");
      } else if (key == "properties") {
        if (!v.is_object()) invalid(where, "properties must be an object");
        for (auto p = v.begin(); p != v.end(); ++p) simple.properties.push_back({p.key(), sub(p.value(), child(where, p.key()))});
      } else if (key == "required") {
        if (!v.is_array()) invalid(where, "required must be an array of strings");
        for (const ojson& name : v) {
          if (!name.is_string()) invalid(where, "required must be an array of strings");
          if (std::find(simple.required.begin(), simple.required.end(), name.get<std::string>()) == simple.required.end())
            simple.required.push_back(name.get<std::string>());
        }
      } else if (key == "additionalProperties") {
        simple.additional = sub(v, where);
      } else if (key == "patternProperties") {
        if (!v.is_object()) invalid(where, "patternProperties must be an object");
        for (auto p = v.begin(); p != v.end(); ++p)
          if (pattern_ok(p.key(), child(where, p.key())))
            simple.pattern_properties.push_back({p.key(), sub(p.value(), child(where, p.key()))});
      } else if (key == "minProperties") {
        raise_minimum(simple.min_properties, v, where);
      } else if (key == "maxProperties") {
        lower_maximum(simple.max_properties, v, where);
      } else if (key == "propertyNames") {
        if (!(v.is_boolean() && v.get<bool>()) && !(v.is_object() && is_annotation_only(v, {})))
          unsupported(where, "propertyNames");
      } else if (key == "dependencies" || key == "dependentRequired" || key == "dependentSchemas") {
        // {a: [b, c]}: a absent, or b and c present; {a: S}: a absent, or S.
        if (!v.is_object()) invalid(where, key + " must be an object");
        for (auto d = v.begin(); d != v.end(); ++d) {
          Simple absent;
          absent.where = child(where, d.key());
          absent.forbidden.push_back(d.key());
          NodeId otherwise = kTrue;
          if (d.value().is_array() && key != "dependentSchemas") {
            Simple present;
            present.where = absent.where;
            for (const ojson& name : d.value()) {
              if (!name.is_string()) invalid(absent.where, "a dependency must name properties");
              present.required.push_back(name.get<std::string>());
            }
            otherwise = add_simple(std::move(present));
          } else if (key != "dependentRequired") {
            otherwise = sub(d.value(), absent.where);
          } else {
            invalid(absent.where, "dependentRequired must map names to arrays");
          }
          conj.push_back(or_node({add_simple(std::move(absent)), otherwise}, child(where, d.key())));
        }
      } else if (key == "unevaluatedProperties") {
        if (v.is_boolean() && v.get<bool>()) continue;
        if (applicators) {
          unsupported(where, "unevaluatedProperties beside allOf / anyOf / oneOf / $ref / not / if");
        } else if (!s.contains("additionalProperties")) {
          simple.additional = sub(v, where);  // with no applicator it is additionalProperties
        }
      } else if (key == "unevaluatedItems") {
        if (v.is_boolean() && v.get<bool>()) continue;
        if (applicators) {
          unsupported(where, "unevaluatedItems beside allOf / anyOf / oneOf / $ref / not / if");
        } else if (!s.contains("items") || s["items"].is_array()) {
          simple.items = sub(v, where);
        }
      } else if (key == "allOf" || key == "anyOf" || key == "oneOf") {
        if (!v.is_array() || v.empty()) invalid(where, key + " must be a non-empty array");
        std::vector<NodeId> kids;
        for (std::size_t i = 0; i < v.size(); ++i) kids.push_back(sub(v[i], child(where, std::to_string(i))));
        if (key == "allOf") {
          conj.insert(conj.end(), kids.begin(), kids.end());
        } else {
          Node node;
          node.kind = key == "anyOf" ? Node::kOr : Node::kOneOf;
          node.kids = std::move(kids);
          node.where = where;
          node.resource = resource;
          for (const ojson& b : v) node.branches.push_back(&b);
          conj.push_back(add_node(std::move(node)));
        }
      } else if (key == "not") {
        if (!v.is_boolean() && !v.is_object()) invalid(where, "not must be a schema");
        std::optional<NodeId> negation = negate(v, where, resource, 0);
        if (negation) {
          conj.push_back(*negation);
        } else {
          unsupported(where, "this not");
        }
      } else if (key == "if") {
        if (s.contains("then") || s.contains("else")) unsupported(where, "if / then / else");
      } else if (key == "$dynamicRef" || key == "$recursiveRef") {
        unsupported(where, key);
      } else if (key == "extends" || key == "disallow" || key == "divisibleBy") {
        unsupported(where, "the draft-3 keyword " + key);
      }
      // Anything else is an annotation or unknown, and validators ignore it too.
    }
    if (tuple_items && additional_items) simple.items = sub(*additional_items, child(ptr, "additionalItems"));
    // Draft 4's exclusiveMinimum / exclusiveMaximum make minimum / maximum strict when truthy. A
    // later-draft validator reads a boolean as the number 0 or 1; unless the schema says it is
    // draft 4, both readings apply (and oneOf / not treat the bounds as unknown).
    for (int side = 0; side < 2; ++side) {
      const ojson* flag = side == 0 ? exclusive_min_bool : exclusive_max_bool;
      if (!flag) continue;
      auto& bounds = side == 0 ? simple.lower : simple.upper;
      bool truthy = flag->is_boolean() ? flag->get<bool>() : flag->is_number() ? flag->get<double>() != 0 : !flag->is_null();
      if (truthy)
        for (NumBound& b : bounds) b.exclusive = true;
      if (draft_ != 4 && draft_ != 3) {
        bounds.push_back({ojson(flag->get<bool>() ? 1 : 0), true});
        simple.ambiguous_bounds = true;
      }
    }
    if (unique_items && !(simple.max_items >= 0 && simple.max_items <= 1)) {
      // Arrays of at most one item are trivially unique; otherwise this cannot be a grammar.
      if (simple.types & kArray) unsupported(child(ptr, "uniqueItems"), "uniqueItems");
    }
    NodeId simple_id = add_simple(std::move(simple));
    NodeId id = simple_id;
    if (!conj.empty()) {
      Node node;
      node.kind = Node::kAnd;
      node.kids.push_back(simple_id);
      node.kids.insert(node.kids.end(), conj.begin(), conj.end());
      node.where = ptr;
      id = add_node(std::move(node));
    }
    built_[&s] = id;
    return id;
  }

  NodeId add_simple(Simple simple) {
    Node node;
    node.where = simple.where;
    node.simple = std::move(simple);
    return add_node(std::move(node));
  }

  NodeId or_node(std::vector<NodeId> kids, const std::string& where) {
    if (kids.size() == 1) return kids[0];
    Node node;
    node.kind = Node::kOr;
    node.kids = std::move(kids);
    node.where = where;
    return add_node(std::move(node));
  }

  // A node for the values `s` rejects, where the schema is one this can negate: keyword by
  // keyword (not (A and B) = not A or not B), each keyword's complement being a simple
  // (type, required, pattern, enum / const of strings, null and booleans, length / item / property
  // counts, numeric bounds, properties, anyOf, allOf, not, $ref). nullopt for anything else.
  std::optional<NodeId> negate(const ojson& s, const std::string& ptr, int32_t resource, int depth) {
    if (depth > 16) return std::nullopt;
    if (s.is_boolean()) return s.get<bool>() ? kFalse : kTrue;
    if (!s.is_object()) return std::nullopt;
    auto res = resource_of_.find(&s);
    if (res != resource_of_.end()) resource = res->second;
    std::vector<NodeId> terms;
    auto term = [&](uint32_t types, auto&& fill) {
      Simple t;
      t.where = ptr;
      t.types = types;
      fill(t);
      terms.push_back(add_simple(std::move(t)));
    };
    auto ref = s.find("$ref");
    if (ref != s.end()) {
      if (!ref->is_string()) return std::nullopt;
      Anchor a = resolve_ref(ref->get<std::string>(), resource, child(ptr, "$ref"));
      std::optional<NodeId> n = negate(*a.schema, a.pointer, a.resource, depth + 1);
      if (!n || (draft_ >= 3 && draft_ <= 7)) return n;
      terms.push_back(*n);
    }
    for (const char* key : {"exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(key) && (s[key].is_boolean() || draft_ == 3 || draft_ == 4)) return std::nullopt;
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& key = it.key();
      const ojson& v = it.value();
      const std::string where = child(ptr, key);
      if (!in_vocabulary(key)) continue;
      if (key == "type") {
        uint32_t mask = types_of(v, where);
        term(kAllTypes & ~mask, [](Simple&) {});
      } else if (key == "required") {
        if (!v.is_array()) return std::nullopt;
        for (const ojson& name : v) {
          if (!name.is_string()) return std::nullopt;
          term(kObject, [&](Simple& t) { t.forbidden.push_back(name.get<std::string>()); });
        }
      } else if (key == "pattern") {
        if (!v.is_string() || !pattern_ok(v.get<std::string>(), where)) return std::nullopt;
        term(kString, [&](Simple& t) { t.not_patterns.push_back(v.get<std::string>()); });
      } else if (key == "enum" || key == "const") {
        std::vector<ojson> values = key == "const" ? std::vector<ojson>{v} : std::vector<ojson>();
        if (key == "enum") {
          if (!v.is_array()) return std::nullopt;
          values.assign(v.begin(), v.end());
        }
        uint32_t others = kObject | kArray | kNumber | kNull | kBool;
        std::vector<std::string> words;
        bool has_true = false, has_false = false;
        for (const ojson& e : values) {
          if (e.is_string()) {
            words.push_back(e.get<std::string>());
          } else if (e.is_null()) {
            others &= ~kNull;
          } else if (e.is_boolean()) {
            (e.get<bool>() ? has_true : has_false) = true;
          } else {
            return std::nullopt;
          }
        }
        if (has_true || has_false) others &= ~kBool;
        term(others, [](Simple&) {});
        term(kString, [&](Simple& t) { t.not_words = words; });
        if (has_true != has_false) term(kBool, [&](Simple& t) {
          t.has_enum = true;
          t.enum_values = {ojson(!has_true)};
        });
      } else if (key == "minLength" || key == "maxLength" || key == "minItems" || key == "maxItems" ||
                 key == "minProperties" || key == "maxProperties") {
        int64_t n = count_of(v, where);
        if (key == "minLength") {
          if (n > 0) term(kString, [&](Simple& t) { t.max_length = n - 1; });
        } else if (key == "maxLength") {
          term(kString, [&](Simple& t) { t.min_length = n + 1; });
        } else if (key == "minItems") {
          if (n > 0) term(kArray, [&](Simple& t) { t.max_items = n - 1; });
        } else if (key == "maxItems") {
          term(kArray, [&](Simple& t) { t.min_items = n + 1; });
        } else if (key == "minProperties") {
          if (n > 0) term(kObject, [&](Simple& t) { t.max_properties = n - 1; });
        } else {
          term(kObject, [&](Simple& t) { t.min_properties = n + 1; });
        }
      } else if (key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum") {
        if (!v.is_number() || !std::isfinite(v.get<double>())) return std::nullopt;
        bool lower = key == "minimum" || key == "exclusiveMinimum";
        bool exclusive = key == "exclusiveMinimum" || key == "exclusiveMaximum";
        term(kNumber, [&](Simple& t) { (lower ? t.upper : t.lower).push_back({v, !exclusive}); });
      } else if (key == "anyOf" || key == "allOf") {
        if (!v.is_array()) return std::nullopt;
        std::vector<NodeId> parts;
        for (std::size_t i = 0; i < v.size(); ++i) {
          std::optional<NodeId> n = negate(v[i], child(where, std::to_string(i)), resource, depth + 1);
          if (!n) return std::nullopt;
          parts.push_back(*n);
        }
        if (key == "allOf") {
          terms.insert(terms.end(), parts.begin(), parts.end());
        } else {
          Node node;
          node.kind = Node::kAnd;
          node.kids = std::move(parts);
          node.where = where;
          terms.push_back(add_node(std::move(node)));
        }
      } else if (key == "not") {
        terms.push_back(build(v, where, resource, depth + 1));
      } else if (key == "properties") {
        if (!v.is_object()) return std::nullopt;
        for (auto p = v.begin(); p != v.end(); ++p) {
          std::optional<NodeId> n = negate(p.value(), child(where, p.key()), resource, depth + 1);
          if (!n) return std::nullopt;
          term(kObject, [&](Simple& t) {
            t.required.push_back(p.key());
            t.properties.push_back({p.key(), *n});
          });
        }
      } else if (key == "format") {
        if (v.is_string() && (schema::format_spec(v.get<std::string>()) || schema::known_unsupported_format(v.get<std::string>())))
          return std::nullopt;
      } else if (key == "uniqueItems") {
        if (!(v.is_boolean() && !v.get<bool>())) return std::nullopt;
      } else if (key == "items" || key == "prefixItems" || key == "additionalItems" || key == "contains" ||
                 key == "additionalProperties" || key == "patternProperties" || key == "propertyNames" ||
                 key == "dependencies" || key == "dependentRequired" || key == "dependentSchemas" ||
                 key == "multipleOf" || key == "oneOf" || key == "if" || key == "unevaluatedProperties" ||
                 key == "unevaluatedItems" || key == "$dynamicRef" || key == "$recursiveRef" ||
                 key == "extends" || key == "disallow" || key == "divisibleBy") {
        return std::nullopt;
      }
      // Annotations and unknown keywords constrain nothing.
    }
    if (terms.empty()) return kFalse;
    return or_node(std::move(terms), ptr);
  }

  // ---- flatten ----------------------------------------------------------------------------

  NodeId resolve(NodeId id) {
    std::set<NodeId> seen;
    while (nodes_[static_cast<std::size_t>(id)].kind == Node::kRef) {
      if (!seen.insert(id).second)
        throw CompileError(nodes_[static_cast<std::size_t>(id)].where, "a $ref cycle that names no schema");
      Node& n = nodes_[static_cast<std::size_t>(id)];
      if (n.target == kAbsent) {
        std::string where = n.where, ref = n.ref;
        int32_t resource = n.resource;
        Anchor a = resolve_ref(ref, resource, where);
        NodeId target = build(*a.schema, a.pointer, a.resource, 0);
        nodes_[static_cast<std::size_t>(id)].target = target;
      }
      id = nodes_[static_cast<std::size_t>(id)].target;
    }
    return id;
  }

  struct InProgress {};

  // The node as a union of simples; throws InProgress when `soft` and the node is being
  // flattened further up (a cycle with no object or array between).
  const std::vector<Simple>& flatten(NodeId id, int depth, bool soft = false) {
    id = resolve(id);
    auto it = flat_.find(id);
    if (it != flat_.end()) {
      if (!it->second.done) {
        if (soft) throw InProgress{};
        throw CompileError(nodes_[static_cast<std::size_t>(id)].where,
                           "a schema that contains itself through allOf / anyOf / oneOf / $ref alone");
      }
      return it->second.simples;
    }
    if (depth > limits_.max_depth) throw CompileError(nodes_[static_cast<std::size_t>(id)].where, "schemas nest deeper than limits.max_depth");
    flat_[id];  // in progress
    std::vector<Simple> out;
    const Node node = nodes_[static_cast<std::size_t>(id)];
    switch (node.kind) {
      case Node::kSimple:
        if (node.simple.types != 0 && !(node.simple.has_enum && node.simple.enum_values.empty())) out.push_back(node.simple);
        break;
      case Node::kOr:
        for (NodeId kid : node.kids) {
          const auto& part = flatten(kid, depth + 1, soft);
          out.insert(out.end(), part.begin(), part.end());
          if (out.size() > kMaxAlternatives)
            throw CompileError(node.where, "anyOf / oneOf / allOf expand to more than 256 alternatives");
        }
        break;
      case Node::kAnd: {
        out.push_back(Simple{});
        out.back().where = node.where;
        for (NodeId kid : node.kids) {
          if (nodes_[static_cast<std::size_t>(resolve(kid))].kind == Node::kOneOf) continue;
          out = cross(out, flatten(kid, depth + 1, soft), node.where);
        }
        for (NodeId kid : node.kids) {
          NodeId k = resolve(kid);
          if (nodes_[static_cast<std::size_t>(k)].kind == Node::kOneOf) out = one_of(out, k, depth + 1, soft);
        }
        break;
      }
      case Node::kOneOf: {
        std::vector<Simple> base{Simple{}};
        base.back().where = node.where;
        out = one_of(base, id, depth + 1, soft);
        break;
      }
      case Node::kRef: break;  // resolved above
    }
    auto& entry = flat_[id];
    entry.simples = std::move(out);
    entry.done = true;
    return entry.simples;
  }

  std::vector<Simple> cross(const std::vector<Simple>& a, const std::vector<Simple>& b, const std::string& where) {
    std::vector<Simple> out;
    for (const Simple& x : a)
      for (const Simple& y : b) {
        Simple m = merge(x, y);
        if (m.types == 0 || (m.has_enum && m.enum_values.empty())) continue;
        out.push_back(std::move(m));
        if (out.size() > kMaxAlternatives)
          throw CompileError(where, "anyOf / oneOf / allOf expand to more than 256 alternatives");
      }
    return out;
  }

  std::vector<Simple> one_of(const std::vector<Simple>& base, NodeId oneof, int depth, bool soft) {
    const Node node = nodes_[static_cast<std::size_t>(oneof)];
    std::vector<Simple> out;
    for (const Simple& b : base) {
      std::vector<std::vector<Simple>> branches;
      for (NodeId kid : node.kids) branches.push_back(cross({b}, flatten(kid, depth + 1, soft), node.where));
      std::size_t overlap_i = 0, overlap_j = 0;
      bool overlap = false;
      for (std::size_t i = 0; i < branches.size() && !overlap; ++i)
        for (std::size_t j = i + 1; j < branches.size() && !overlap; ++j)
          for (const Simple& x : branches[i]) {
            for (const Simple& y : branches[j])
              if (!disjoint(x, y, depth + 1)) {
                overlap = true;
                overlap_i = i;
                overlap_j = j;
                break;
              }
            if (overlap) break;
          }
      if (overlap && options_.lenient) {
        // As llguidance's lenient mode does (its coerce_one_of): negating the other branches
        // multiplies alternatives, which can push an enclosing schema past its bound.
        g_.add_relaxation({{}, node.where, "oneOf whose branches " + std::to_string(overlap_i) + " and " +
                                           std::to_string(overlap_j) + " may both match is read as anyOf (lenient)"});
      } else if (overlap) {
        // Exactly one: branch i and the negation of every other branch.
        std::vector<NodeId> negations;
        for (std::size_t j = 0; j < node.branches.size(); ++j) {
          std::optional<NodeId> n = negate(*node.branches[j], child(node.where, std::to_string(j)), node.resource, 0);
          if (!n)
            throw CompileError(node.where, "oneOf whose branches " + std::to_string(overlap_i) + " and " +
                                               std::to_string(overlap_j) +
                                               " may both match, and which cannot be negated, is not supported");
          negations.push_back(*n);
        }
        for (std::size_t i = 0; i < branches.size(); ++i)
          for (std::size_t j = 0; j < branches.size(); ++j)
            if (j != i) branches[i] = cross(branches[i], flatten(negations[j], depth + 1, soft), node.where);
      }
      for (auto& branch : branches) {
        out.insert(out.end(), branch.begin(), branch.end());
        if (out.size() > kMaxAlternatives)
          throw CompileError(node.where, "anyOf / oneOf / allOf expand to more than 256 alternatives");
      }
    }
    return out;
  }

  NodeId and_node(NodeId a, NodeId b) {
    if (a == kAbsent) return b;
    if (b == kAbsent) return a;
    if (a == kTrue) return b;
    if (b == kTrue) return a;
    if (a == kFalse || b == kFalse) return kFalse;
    if (a == b) return a;
    auto key = std::minmax(a, b);
    auto it = ands_.find(key);
    if (it != ands_.end()) return it->second;
    Node node;
    node.kind = Node::kAnd;
    node.kids = {key.first, key.second};
    node.where = nodes_[static_cast<std::size_t>(a)].where;
    NodeId id = add_node(std::move(node));
    ands_[key] = id;
    return id;
  }

  // The node the value of key `name` must match in an object of `s` (absent additionalProperties
  // allows anything here unless strict_absent; strictness applies at emission). A pattern that
  // may match the name (in either regex dialect) applies its schema; additionalProperties
  // applies unless the name is listed or some pattern surely matches it.
  NodeId key_schema(const Simple& s, const std::string& name, bool strict_absent) {
    if (std::find(s.forbidden.begin(), s.forbidden.end(), name) != s.forbidden.end()) return kFalse;
    NodeId out = kTrue;
    bool claimed = false;
    for (const auto& [prop, id] : s.properties)
      if (prop == name) {
        out = and_node(out, id);
        claimed = true;
      }
    for (const auto& [pattern, id] : s.pattern_properties) {
      if (pattern_dfa(pattern, s.where, true).matches(name)) out = and_node(out, id);
      if (pattern_dfa(pattern, s.where, false).matches(name)) claimed = true;
    }
    if (!claimed) out = and_node(out, effective_additional(s, strict_absent));
    return out;
  }

  // Whether the regex dialects disagree on some pattern for this name.
  bool ambiguous_key(const Simple& s, const std::string& name) {
    for (const auto& [pattern, id] : s.pattern_properties) {
      (void)id;
      if (pattern_dfa(pattern, s.where, true).matches(name) != pattern_dfa(pattern, s.where, false).matches(name))
        return true;
    }
    return false;
  }

  NodeId effective_additional(const Simple& s, bool strict_absent) const {
    if (s.additional != kAbsent) return s.additional;
    if (strict_absent && options_.strict && (!s.properties.empty() || !s.pattern_properties.empty())) return kFalse;
    return kTrue;
  }

  Simple merge(const Simple& a, const Simple& b) {
    Simple m;
    m.where = a.where;
    m.types = a.types & b.types;
    if (a.has_enum) intersect_enum(m, a.enum_values);
    if (b.has_enum) intersect_enum(m, b.enum_values);
    m.min_length = std::max(a.min_length, b.min_length);
    m.max_length = a.max_length < 0 ? b.max_length : b.max_length < 0 ? a.max_length : std::min(a.max_length, b.max_length);
    auto cat = [](auto x, const auto& y) {
      x.insert(x.end(), y.begin(), y.end());
      return x;
    };
    m.patterns = cat(a.patterns, b.patterns);
    m.not_patterns = cat(a.not_patterns, b.not_patterns);
    m.not_words = cat(a.not_words, b.not_words);
    m.formats = cat(a.formats, b.formats);
    m.lower = cat(a.lower, b.lower);
    m.upper = cat(a.upper, b.upper);
    m.multiples = cat(a.multiples, b.multiples);
    // arrays
    std::size_t n = std::max(a.prefix.size(), b.prefix.size());
    auto at = [](const Simple& s, std::size_t i) { return i < s.prefix.size() ? s.prefix[i] : s.items; };
    for (std::size_t i = 0; i < n; ++i) m.prefix.push_back(and_node(at(a, i) == kAbsent ? kTrue : at(a, i), at(b, i)));
    m.items = and_node(a.items, b.items);
    m.min_items = std::max(a.min_items, b.min_items);
    m.max_items = a.max_items < 0 ? b.max_items : b.max_items < 0 ? a.max_items : std::min(a.max_items, b.max_items);
    // objects
    if (!a.pattern_properties.empty() && !b.pattern_properties.empty()) {
      std::set<std::string> pa, pb;
      for (const auto& p : a.pattern_properties) pa.insert(p.first);
      for (const auto& p : b.pattern_properties) pb.insert(p.first);
      if (pa != pb) {
        unsupported(a.where, "allOf whose members have different patternProperties");
      }
    }
    std::set<std::string> names;
    for (const auto& [name, id] : a.properties) {
      (void)id;
      if (!names.insert(name).second) continue;
      m.properties.push_back({name, and_node(key_schema(a, name, false), key_schema(b, name, false))});
    }
    for (const auto& [name, id] : b.properties) {
      (void)id;
      if (!names.insert(name).second) continue;
      m.properties.push_back({name, and_node(key_schema(a, name, false), key_schema(b, name, false))});
    }
    if (b.pattern_properties.empty()) {
      for (const auto& [p, id] : a.pattern_properties)
        m.pattern_properties.push_back({p, and_node(id, b.additional == kAbsent ? kTrue : b.additional)});
    } else if (a.pattern_properties.empty()) {
      for (const auto& [p, id] : b.pattern_properties)
        m.pattern_properties.push_back({p, and_node(id, a.additional == kAbsent ? kTrue : a.additional)});
    } else {
      for (const auto& [p, id] : a.pattern_properties) {
        NodeId merged = id;
        for (const auto& [q, jd] : b.pattern_properties)
          if (q == p) merged = and_node(merged, jd);
        m.pattern_properties.push_back({p, merged});
      }
    }
    m.additional = and_node(a.additional, b.additional);
    m.required = a.required;
    for (const std::string& r : b.required)
      if (std::find(m.required.begin(), m.required.end(), r) == m.required.end()) m.required.push_back(r);
    m.forbidden = cat(a.forbidden, b.forbidden);
    m.min_properties = std::max(a.min_properties, b.min_properties);
    m.ambiguous_bounds = a.ambiguous_bounds || b.ambiguous_bounds;
    m.max_properties = a.max_properties < 0 ? b.max_properties
                       : b.max_properties < 0 ? a.max_properties
                                              : std::min(a.max_properties, b.max_properties);
    return m;
  }

  // ---- automata -----------------------------------------------------------------------------

  // The strings `pattern` surely matches (both dialects), or with `wide` those it may match.
  const Dfa& pattern_dfa(const std::string& pattern, const std::string& where, bool wide) {
    const std::string key = (wide ? "w" : "n") + pattern;
    auto it = patterns_.find(key);
    if (it != patterns_.end()) return it->second;
    Dfa dfa;
    try {
      dfa = schema::regex_dfa(pattern, true, dfa_limits_, wide);
    } catch (const DfaError& e) {
      std::string at = e.offset() >= 0 ? " at byte " + std::to_string(e.offset()) + " of the pattern" : "";
      throw CompileError(where, std::string("the pattern \"") + pattern + "\": " + e.what() + at);
    }
    return patterns_.emplace(key, std::move(dfa)).first->second;
  }

  std::string string_key(const Simple& s) const {
    ojson key = ojson::array();
    key.push_back(s.min_length);
    key.push_back(s.max_length);
    for (const auto* list : {&s.patterns, &s.not_patterns, &s.formats, &s.not_words}) {
      std::vector<std::string> sorted = *list;
      std::sort(sorted.begin(), sorted.end());
      sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
      key.push_back(sorted);
    }
    return key.dump();
  }

  // The decoded strings the simple's string keywords allow. Where a length bound and a pattern
  // or format together need more automaton states than the limit allows, the maximum length is
  // lowered (to 4096, 1024, then 256 code points): only longer strings are lost.
  const Dfa& string_dfa(const Simple& s) {
    std::string key = string_key(s);
    auto it = strings_.find(key);
    if (it != strings_.end()) return it->second;
    return narrow_string_dfa(s, key);
  }

  // The strings a validator may accept: patterns in either dialect, formats unchecked (many
  // validators only annotate them), lengths as they are. For oneOf's disjointness.
  const Dfa& wide_string_dfa(const Simple& s) {
    std::string key = "wide" + string_key(s);
    auto it = strings_.find(key);
    if (it != strings_.end()) return it->second;
    Dfa d = with_dfa(s.where, [&] {
      Dfa out = schema::utf8_dfa();
      for (const std::string& p : s.patterns) out = schema::intersect(out, pattern_dfa(p, s.where, true), dfa_limits_);
      for (const std::string& p : s.not_patterns)
        out = schema::intersect(out, schema::complement(pattern_dfa(p, s.where, false), dfa_limits_), dfa_limits_);
      if (!s.not_words.empty())
        out = schema::intersect(out, schema::complement(schema::words_dfa(s.not_words), dfa_limits_), dfa_limits_);
      if (s.min_length > 0 || s.max_length >= 0)
        out = schema::intersect(out, schema::length_dfa(s.min_length, s.max_length, dfa_limits_), dfa_limits_);
      return out;
    });
    return strings_.emplace(key, std::move(d)).first->second;
  }

  const Dfa& narrow_string_dfa(const Simple& s, const std::string& key) {
    const int64_t max = capped(s.max_length);
    check_repeat(s.min_length, child(s.where, "minLength"));
    std::vector<int64_t> tries{max};
    if (max >= 0 && s.patterns.size() + s.not_patterns.size() + s.formats.size() + (s.not_words.empty() ? 0 : 1) > 0)
      for (int64_t lower : {int64_t{4096}, int64_t{1024}, int64_t{256}})
        if (lower < max && lower >= s.min_length) tries.push_back(lower);
    // Each within a smaller budget (a string's automaton is its grammar: a state is a rule); a
    // bound that cannot be lowered gets the whole limit.
    DfaLimits soft = dfa_limits_;
    soft.max_states = std::min<int64_t>(soft.max_states, kStringStateBudget);
    for (int64_t m : tries) {
      try {
        return strings_.emplace(key, build_string_dfa(s, m, soft)).first->second;
      } catch (const DfaError&) {
      }
    }
    if (tries.size() > 1) throw CompileError(s.where, "the string's pattern / format and length need too many automaton states");
    Dfa dfa = with_dfa(s.where, [&] { return build_string_dfa(s, tries.back(), dfa_limits_); });
    return strings_.emplace(key, std::move(dfa)).first->second;
  }

  Dfa build_string_dfa(const Simple& s, int64_t max, const DfaLimits& limits) {
    Dfa d = schema::utf8_dfa();
    for (const std::string& f : s.formats) {
      auto fit = formats_.find(f);
      if (fit == formats_.end()) {
        auto spec = schema::format_spec(f);
        Dfa fd = schema::regex_dfa(spec->regex, false, dfa_limits_);
        if (spec->max_length >= 0) fd = schema::intersect(fd, schema::length_dfa(0, spec->max_length, dfa_limits_), dfa_limits_);
        fit = formats_.emplace(f, std::move(fd)).first;
      }
      d = schema::intersect(d, fit->second, limits);
    }
    for (const std::string& p : s.patterns) d = schema::intersect(d, pattern_dfa(p, s.where, false), limits);
    // A negated pattern excludes every string either dialect matches.
    for (const std::string& p : s.not_patterns)
      d = schema::intersect(d, schema::complement(pattern_dfa(p, s.where, true), limits), limits);
    if (!s.not_words.empty()) d = schema::intersect(d, schema::complement(schema::words_dfa(s.not_words), limits), limits);
    // The length last: its product with the rest is the largest automaton here.
    if (s.min_length > 0 || max >= 0) d = schema::intersect(d, schema::length_dfa(s.min_length, max, limits), limits);
    return d;
  }

  // ---- numbers ------------------------------------------------------------------------------

  // A bound as an inclusive exact decimal (see json_schema_numbers.cpp).
  Decimal inclusive_bound(const NumBound& b, bool upper, bool integer_only) {
    Decimal d = decimal_of(b.value);
    if (integer_only) {
      if (!upper) return b.exclusive ? schema::add_one(schema::floor_decimal(d)) : schema::ceil_decimal(d);
      return b.exclusive ? schema::sub_one(schema::ceil_decimal(d)) : schema::floor_decimal(d);
    }
    if (!b.exclusive) {
      // An integer bound beyond 2^53 against a fraction literal, which a validator rounds to a
      // double: the bound becomes the first double on its side.
      if (b.value.is_number_float() || std::fabs(b.value.get<double>()) < 9007199254740992.0) return d;
      double x = b.value.get<double>();
      int c = schema::compare(schema::decimal_of_double(x), d);
      if (upper ? c > 0 : c < 0) x = std::nextafter(x, upper ? -HUGE_VAL : HUGE_VAL);
      return schema::decimal_of_double(x);
    }
    double x = b.value.get<double>();
    if (!std::isfinite(x)) return d;
    double inf = upper ? -HUGE_VAL : HUGE_VAL;
    double n = x;
    int c = schema::compare(schema::decimal_of_double(x), d);  // the double vs the exact bound
    if (upper ? c >= 0 : c <= 0) n = std::nextafter(x, inf);
    return schema::decimal_of_double(n);
  }

  struct NumberRange {
    std::optional<Decimal> lower, upper;
    int64_t multiple = 0;
    bool float_multiple = false;
    bool integer_only = false;
    bool zero_fraction = false;  // integers may be written n.0 (type number, or drafts after 4)
    bool empty = false;
  };

  NumberRange number_range(const Simple& s) {
    NumberRange r;
    r.integer_only = !(s.types & kFrac);
    int64_t multiple = 1;
    for (const ojson& m : s.multiples) {
      if (!integral_number(m) || m.get<double>() > static_cast<double>(kMaxMultiple)) {
        unsupported(child(s.where, "multipleOf"),
                    integral_number(m) ? "multipleOf above 10000" : "multipleOf with a fractional value (validators compare in floating point)");
        continue;
      }
      int64_t k = static_cast<int64_t>(m.get<double>());
      if (m.is_number_float()) r.float_multiple = true;
      multiple = std::lcm(multiple, k);
      if (multiple > kMaxMultiple) {
        unsupported(child(s.where, "multipleOf"), "multipleOf whose least common multiple is above 10000");
        multiple = 1;
      }
      r.integer_only = true;
    }
    if (multiple > 1) r.multiple = multiple;
    for (const NumBound& b : s.lower) {
      Decimal d = inclusive_bound(b, false, r.integer_only);
      if (!r.lower || schema::compare(d, *r.lower) > 0) r.lower = d;
    }
    for (const NumBound& b : s.upper) {
      Decimal d = inclusive_bound(b, true, r.integer_only);
      if (!r.upper || schema::compare(d, *r.upper) < 0) r.upper = d;
    }
    if (r.lower && r.upper && schema::compare(*r.lower, *r.upper) > 0) r.empty = true;
    r.zero_fraction = r.integer_only && ((s.types & kFrac) || (draft_ != 3 && draft_ != 4));
    return r;
  }

  static bool divisible(const Decimal& d, int64_t k) {
    if (!d.is_integer()) return false;
    int64_t rem = 0;
    for (char c : d.int_digits) rem = (rem * 10 + (c - '0')) % k;
    return rem == 0;
  }

  // ---- disjointness (oneOf) -----------------------------------------------------------------
  //
  // oneOf may be read as anyOf only when no value a validator may accept under one branch is
  // one it may accept under another, so these tests take every keyword in its widest reading:
  // patterns in either regex dialect, formats unchecked, bounds as the validator's doubles.

  bool disjoint_nodes(NodeId a, NodeId b, int depth) {
    if (depth > limits_.max_depth) return false;
    try {
      const std::vector<Simple> xs = flatten(a, depth + 1, true);
      const std::vector<Simple> ys = flatten(b, depth + 1, true);
      for (const Simple& x : xs)
        for (const Simple& y : ys)
          if (!disjoint(x, y, depth + 1)) return false;
      return true;
    } catch (const InProgress&) {
      return false;
    }
  }

  // The bound as the validator compares it: the double, and whether it is strict.
  struct RawBound {
    double value;
    bool exclusive;
  };
  static std::optional<RawBound> tightest(const std::vector<NumBound>& bounds, bool upper) {
    std::optional<RawBound> out;
    for (const NumBound& b : bounds) {
      RawBound r{b.value.get<double>(), b.exclusive};
      if (!out || (upper ? r.value < out->value : r.value > out->value) || (r.value == out->value && r.exclusive))
        out = r;
    }
    return out;
  }
  // No number is at or above `lower` and at or below `upper`.
  static bool apart(const std::optional<RawBound>& upper, const std::optional<RawBound>& lower) {
    if (!upper || !lower) return false;
    return upper->value < lower->value || (upper->value == lower->value && (upper->exclusive || lower->exclusive));
  }

  bool disjoint(const Simple& a, const Simple& b, int depth) {
    if (depth > limits_.max_depth) return false;
    if (a.has_enum || b.has_enum) {
      const Simple& e = a.has_enum ? a : b;
      const Simple& o = a.has_enum ? b : a;
      for (const ojson& v : e.enum_values)
        if (validate_simple(v, e, depth + 1, true) && validate_simple(v, o, depth + 1, true)) return false;
      return true;
    }
    uint32_t common = a.types & b.types;
    if (common & (kNull | kBool)) return false;
    if (common & kNumber) {
      if (a.ambiguous_bounds || b.ambiguous_bounds) return false;
      bool separate = apart(tightest(a.upper, true), tightest(b.lower, false)) ||
                      apart(tightest(b.upper, true), tightest(a.lower, false));
      if (!separate) return false;
    }
    if (common & kString) {
      if (!a.has_string_constraints() && !b.has_string_constraints()) return false;
      try {
        const Dfa& da = wide_string_dfa(a);
        const Dfa& db = wide_string_dfa(b);
        if (!schema::intersect(da, db, dfa_limits_).empty()) return false;
      } catch (const CompileError&) {
        return false;
      } catch (const DfaError&) {
        return false;
      }
    }
    if (common & kArray) {
      auto max_of = [](const Simple& s) {
        int64_t m = s.max_items;
        if (s.items == kFalse) m = m < 0 ? static_cast<int64_t>(s.prefix.size()) : std::min<int64_t>(m, static_cast<int64_t>(s.prefix.size()));
        return m;
      };
      int64_t amax = max_of(a), bmax = max_of(b);
      if (!((amax >= 0 && amax < b.min_items) || (bmax >= 0 && bmax < a.min_items))) return false;
    }
    if (common & kObject) {
      bool separate = false;
      for (const Simple* s : {&a, &b}) {
        for (const std::string& name : s->required) {
          if (ambiguous_key(a, name) || ambiguous_key(b, name)) continue;
          if (disjoint_nodes(key_schema(a, name, true), key_schema(b, name, true), depth + 1)) {
            separate = true;
            break;
          }
        }
        if (separate) break;
      }
      if (!separate) return false;
    }
    return true;
  }

  // ---- validation (enum values against their siblings) --------------------------------------
  //
  // Whether `v` is valid: surely (the narrow reading the grammar takes), or with `wide` whether
  // some validator may accept it (the reading disjoint() needs).

  bool validate(const ojson& v, NodeId id, int depth, bool wide = false) {
    if (depth > limits_.max_depth) return wide;
    try {
      const std::vector<Simple> simples = flatten(id, depth + 1, true);
      for (const Simple& s : simples)
        if (validate_simple(v, s, depth + 1, wide)) return true;
    } catch (const InProgress&) {
      return wide;
    }
    return false;
  }

  bool validate_simple(const ojson& v, const Simple& s, int depth, bool wide = false) {
    if (depth > limits_.max_depth) return wide;
    if (s.has_enum) {
      bool found = false;
      // Quadratic over an enum's own values (each is checked against the rest of its schema):
      // 10,000 values are 10^8 comparisons, so the deadline is checked as it goes.
      for (const ojson& e : s.enum_values) {
        limits_.check_deadline();
        if (json_equal(v, e)) {
          found = true;
          break;
        }
      }
      if (!found) return false;
    }
    switch (v.type()) {
      case ojson::value_t::null: return s.types & kNull;
      case ojson::value_t::boolean: return s.types & kBool;
      case ojson::value_t::string:
        if (!(s.types & kString)) return false;
        if (!s.has_string_constraints()) return true;
        try {
          return (wide ? wide_string_dfa(s) : string_dfa(s)).matches(v.get_ref<const std::string&>());
        } catch (const CompileError&) {
          if (wide) return true;
          throw;
        }
      case ojson::value_t::number_integer:
      case ojson::value_t::number_unsigned:
      case ojson::value_t::number_float: {
        if (v.is_number_float() && !std::isfinite(v.get<double>())) return false;
        bool integral = integral_number(v);
        if (!(s.types & (integral ? kInt : kFrac)) && !(wide && (s.types & kNumber))) return false;
        if (wide) {
          if (s.ambiguous_bounds) return true;
          double x = v.get<double>();
          for (const NumBound& b : s.lower) {
            double d = b.value.get<double>();
            if (x < d || (b.exclusive && x == d)) return false;
          }
          for (const NumBound& b : s.upper) {
            double d = b.value.get<double>();
            if (x > d || (b.exclusive && x == d)) return false;
          }
          return true;  // multipleOf: floating point, maybe
        }
        NumberRange r = number_range(s);
        if (r.empty) return false;
        Decimal d = *schema::parse_decimal(v.dump());
        if (r.integer_only && !d.is_integer()) return false;
        if (r.lower && schema::compare(d, *r.lower) < 0) return false;
        if (r.upper && schema::compare(d, *r.upper) > 0) return false;
        if (r.multiple > 0 && !divisible(d, r.multiple)) return false;
        if (r.float_multiple && d.int_digits.size() > 15) return false;
        return true;
      }
      case ojson::value_t::array: {
        if (!(s.types & kArray)) return false;
        int64_t n = static_cast<int64_t>(v.size());
        if (n < s.min_items || (s.max_items >= 0 && n > s.max_items)) return false;
        for (std::size_t i = 0; i < v.size(); ++i) {
          NodeId e = i < s.prefix.size() ? s.prefix[i] : s.items;
          if (e != kAbsent && !validate(v[i], e, depth + 1, wide)) return false;
        }
        return true;
      }
      case ojson::value_t::object: {
        if (!(s.types & kObject)) return false;
        int64_t n = static_cast<int64_t>(v.size());
        if (n < s.min_properties || (s.max_properties >= 0 && n > s.max_properties)) return false;
        for (const std::string& r : s.required)
          if (!v.contains(r)) return false;
        for (auto it = v.begin(); it != v.end(); ++it) {
          if (wide && ambiguous_key(s, it.key())) continue;
          if (!validate(it.value(), key_schema(s, it.key(), true), depth + 1, wide)) return false;
        }
        return true;
      }
      default: return false;
    }
  }

  // ---- emission -----------------------------------------------------------------------------

  Symbol lit_byte(char c) { return g_.terminal(ByteSet::of(static_cast<uint8_t>(c))); }
  Sequence lit(std::string_view text) { return g_.literal(text); }
  static Sequence cat(Sequence a, const Sequence& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  Symbol ws() {
    if (ws_ >= 0) return Grammar::rule(ws_);
    ByteSet space;
    for (char c : {' ', '\t', '\n', '\r'}) space.add(static_cast<uint8_t>(c));
    Symbol sp = g_.terminal(space);
    int32_t n = std::max(0, options_.max_whitespace);
    RuleId prev = g_.add_rule("ws0");
    g_.add_alternative(prev, {});
    for (int32_t k = 1; k <= n; ++k) {
      RuleId r = g_.add_rule("ws" + std::to_string(k));
      g_.add_alternative(r, {});
      g_.add_alternative(r, {sp, Grammar::rule(prev)});
      prev = r;
    }
    ws_ = prev;
    return Grammar::rule(ws_);
  }

  // One character of a JSON string, in any of its forms.
  Symbol string_char() {
    if (char_ >= 0) return Grammar::rule(char_);
    RuleId r = g_.add_rule("char");
    auto t = [&](uint8_t lo, uint8_t hi) { return g_.terminal(ByteSet::range(lo, hi)); };
    ByteSet ascii;
    ascii.add_range(0x20, 0x7F);
    ascii.words[0x22 >> 6] &= ~(uint64_t{1} << (0x22 & 63));
    ascii.words[0x5C >> 6] &= ~(uint64_t{1} << (0x5C & 63));
    Symbol cont = t(0x80, 0xBF);
    g_.add_alternative(r, {g_.terminal(ascii)});
    g_.add_alternative(r, {t(0xC2, 0xDF), cont});
    g_.add_alternative(r, {t(0xE0, 0xE0), t(0xA0, 0xBF), cont});
    ByteSet e1;
    e1.add_range(0xE1, 0xEC);
    e1.add_range(0xEE, 0xEF);
    g_.add_alternative(r, {g_.terminal(e1), cont, cont});
    g_.add_alternative(r, {t(0xED, 0xED), t(0x80, 0x9F), cont});
    g_.add_alternative(r, {t(0xF0, 0xF0), t(0x90, 0xBF), cont, cont});
    g_.add_alternative(r, {t(0xF1, 0xF3), cont, cont, cont});
    g_.add_alternative(r, {t(0xF4, 0xF4), t(0x80, 0x8F), cont, cont});
    add_escape_alternatives(r);
    char_ = r;
    return Grammar::rule(char_);
  }

  // One escape sequence of a JSON string.
  RuleId escape_rule() {
    if (escape_ >= 0) return escape_;
    escape_ = g_.add_rule("escape");
    add_escape_alternatives(escape_);
    return escape_;
  }

  // \" \\ \/ \b \f \n \r \t and \uXXXX (surrogates only in pairs) as alternatives of `r`.
  void add_escape_alternatives(RuleId r) {
    auto t = [&](uint8_t lo, uint8_t hi) { return g_.terminal(ByteSet::range(lo, hi)); };
    ByteSet esc;
    for (char c : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'}) esc.add(static_cast<uint8_t>(c));
    Symbol bs = lit_byte('\\'), u = lit_byte('u');
    g_.add_alternative(r, {bs, g_.terminal(esc)});
    ByteSet hex;
    hex.add_range('0', '9');
    hex.add_range('a', 'f');
    hex.add_range('A', 'F');
    Symbol h = g_.terminal(hex);
    ByteSet first;  // not a surrogate: 0-9 A-C E-F
    first.add_range('0', '9');
    first.add_range('a', 'c');
    first.add_range('A', 'C');
    first.add_range('e', 'f');
    first.add_range('E', 'F');
    ByteSet d;
    d.add('d');
    d.add('D');
    Symbol sd = g_.terminal(d);
    g_.add_alternative(r, {bs, u, g_.terminal(first), h, h, h});
    g_.add_alternative(r, {bs, u, sd, t('0', '7'), h, h});
    ByteSet high;  // D800-DBFF
    high.add_range('8', '9');
    high.add_range('a', 'b');
    high.add_range('A', 'B');
    ByteSet low;  // DC00-DFFF
    low.add_range('c', 'f');
    low.add_range('C', 'F');
    g_.add_alternative(r, {bs, u, sd, g_.terminal(high), h, h, bs, u, sd, g_.terminal(low), h, h});
  }

  // ---- strings that never contain options_.excluded_text -----------------------------------

  // A search for the excluded text over code points (Knuth-Morris-Pratt): state k says how much
  // of it ends the string so far; moves[k] lists, per next state, the code points that lead
  // there (reaching the whole text is no move).
  struct Guard {
    int32_t length = 0;
    std::vector<std::vector<std::pair<int32_t, detail::CodeSet>>> moves;
  };

  const Guard& guard() {
    if (guard_) return *guard_;
    const std::string_view text = options_.excluded_text;
    if (text.empty()) {  // nothing excluded: one state, every code point
      Guard all;
      all.length = 1;
      all.moves.push_back({{0, detail::CodeSet::any()}});
      guard_ = std::move(all);
      return *guard_;
    }
    std::vector<uint32_t> cps;
    for (std::size_t pos = 0; pos < text.size();) {
      uint32_t cp = 0;
      if (!detail::decode_utf8(text, pos, cp)) throw CompileError("", "excluded_text is not UTF-8");
      cps.push_back(cp);
    }
    // In JSON text an escape sequence then never takes part in a match: the text has no '\',
    // and starts with no character an escape can hold after its '\'.
    if (std::find(cps.begin(), cps.end(), uint32_t{'\\'}) != cps.end() ||
        std::string_view("\"/bfnrtu0123456789abcdefABCDEF").find(static_cast<char>(cps[0] < 0x80 ? cps[0] : 0)) !=
            std::string_view::npos)
      throw CompileError("", "excluded_text must not contain '\\' or start with a character of an escape sequence");
    const int32_t n = static_cast<int32_t>(cps.size());
    std::vector<int32_t> border(cps.size(), 0);
    for (int32_t i = 1, k = 0; i < n; ++i) {
      while (k > 0 && cps[static_cast<std::size_t>(i)] != cps[static_cast<std::size_t>(k)]) k = border[static_cast<std::size_t>(k - 1)];
      if (cps[static_cast<std::size_t>(i)] == cps[static_cast<std::size_t>(k)]) ++k;
      border[static_cast<std::size_t>(i)] = k;
    }
    std::vector<uint32_t> distinct = cps;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    detail::CodeSet others = detail::CodeSet::any();
    {
      detail::CodeSet listed;
      for (const uint32_t cp : distinct) listed.add(cp);
      others = listed.complement();
    }
    Guard g;
    g.length = n;
    for (int32_t state = 0; state < n; ++state) {
      std::map<int32_t, detail::CodeSet> by_target;
      by_target[0] = others;
      for (const uint32_t cp : distinct) {
        int32_t k = state;
        while (k > 0 && cps[static_cast<std::size_t>(k)] != cp) k = border[static_cast<std::size_t>(k - 1)];
        if (cps[static_cast<std::size_t>(k)] == cp) ++k;
        if (k < n) by_target[k].add(cp);
      }
      g.moves.emplace_back(by_target.begin(), by_target.end());
    }
    guard_ = std::move(g);
    return *guard_;
  }

  // One character from `set`: raw UTF-8 (in JSON text only the code points it may hold as
  // themselves), and in JSON text when `escapes` also any escape sequence.
  Symbol guarded_char(const detail::CodeSet& set, bool json, bool escapes) {
    const auto key = std::make_tuple(set.ranges(), json, escapes);
    if (const auto found = guarded_chars_.find(key); found != guarded_chars_.end()) return found->second;
    const Symbol symbol = make_guarded_char(set, json, escapes);
    guarded_chars_.emplace(key, symbol);
    return symbol;
  }

  Symbol make_guarded_char(const detail::CodeSet& set, bool json, bool escapes) {
    detail::CodeSet raw = set;
    if (json) {
      detail::CodeSet writable = detail::CodeSet::range(0x20, detail::kMaxCodePoint);
      detail::CodeSet quote_or_backslash;
      quote_or_backslash.add('"');
      quote_or_backslash.add('\\');
      raw = intersection(raw, intersection(writable, quote_or_backslash.complement()));
    }
    if (!escapes) return builder_.as_symbol(builder_.code_set(raw, 0), 0, "char");
    const RuleId r = g_.add_rule("char");
    g_.add_alternative(r, builder_.code_set(raw, 0));
    g_.add_alternative(r, {Grammar::rule(escape_rule())});
    return Grammar::rule(r);
  }

  static detail::CodeSet intersection(const detail::CodeSet& a, const detail::CodeSet& b) {
    detail::CodeSet either = a.complement();
    either.add(b.complement());
    return either.complement();
  }

  // The rest of a string of min..max code points (max < 0: no bound) that never contains
  // options_.excluded_text: string_body's chain of counts, times the search's state. (An
  // automaton for both would need a state for each partial UTF-8 character at every count.)
  // `json`: JSON text after the opening quote, ending with the closing one; otherwise the raw
  // string, ending where it ends.
  RuleId guarded_body(int64_t min, int64_t max, bool json) {
    check_repeat(min, "");
    const Guard& g = guard();
    std::vector<std::pair<int64_t, int64_t>> chain;
    for (int64_t a = min, b = max;;) {
      chain.push_back({a, b});
      if (b == 0 || (a == 0 && b < 0)) break;
      a = std::max<int64_t>(a - 1, 0);
      b = b < 0 ? -1 : b - 1;
    }
    const auto rule_of = [&](std::size_t i, int32_t state) {
      const auto key = std::make_tuple(chain[i].first, chain[i].second, state, json);
      auto found = guarded_.find(key);
      if (found == guarded_.end()) {
        found = guarded_.emplace(key, g_.add_rule(str_cat("guarded", chain[i].first, "_", chain[i].second, "_", state))).first;
        // A family per guard state: the counts are the rest of the rule's name.
        auto family = guarded_families_.find({state, json});
        if (family == guarded_families_.end()) family = guarded_families_.emplace(std::make_pair(state, json), g_.add_counted_family()).first;
        g_.set_counted(found->second, {family->second, chain[i].first, chain[i].second});
      }
      return found->second;
    };
    const Sequence end = json ? Sequence{lit_byte('"')} : Sequence{};
    // The characters of each move, shared by every count.
    std::vector<std::vector<Symbol>> chars(static_cast<std::size_t>(g.length));
    for (int32_t k = 0; k < g.length; ++k)
      for (const auto& [target, set] : g.moves[static_cast<std::size_t>(k)])
        chars[static_cast<std::size_t>(k)].push_back(guarded_char(set, json, json && target == 0));
    for (std::size_t i = chain.size(); i-- > 0;) {
      const auto [a, b] = chain[i];
      const std::size_t next = (a == 0 && b < 0) ? i : i + 1;
      for (int32_t k = 0; k < g.length; ++k) {
        const RuleId r = rule_of(i, k);
        if (!g_.alternatives(r).empty()) continue;
        if (a == 0) g_.add_alternative(r, end);
        if (b == 0) continue;
        const auto& moves = g.moves[static_cast<std::size_t>(k)];
        for (std::size_t m = 0; m < moves.size(); ++m)
          g_.add_alternative(r, {chars[static_cast<std::size_t>(k)][m], Grammar::rule(rule_of(next, moves[m].first))});
      }
      check_size("");
    }
    return rule_of(0, 0);
  }

  // The rest of a free string after its opening quote: min..max characters, then '"'.
  RuleId string_body(int64_t min, int64_t max) {
    auto key = std::make_pair(min, max);
    auto it = bodies_.find(key);
    if (it != bodies_.end()) return it->second;
    RuleId r = g_.add_rule("str" + std::to_string(min) + "_" + std::to_string(max));
    bodies_[key] = r;
    // Build the chain iteratively from the end: (0, max-k) rules first.
    std::vector<std::pair<int64_t, int64_t>> chain;
    for (int64_t a = min, b = max;; ) {
      chain.push_back({a, b});
      if (b == 0 || (a == 0 && b < 0)) break;
      a = std::max<int64_t>(a - 1, 0);
      b = b < 0 ? -1 : b - 1;
      if (bodies_.count({a, b})) break;
    }
    // Create rules for every chain element, then fill.
    std::vector<RuleId> ids;
    if (body_family_ < 0) body_family_ = g_.add_counted_family();
    for (const auto& [a, b] : chain) {
      auto f = bodies_.find({a, b});
      if (f == bodies_.end()) {
        f = bodies_.emplace(std::make_pair(a, b), g_.add_rule("str" + std::to_string(a) + "_" + std::to_string(b))).first;
        // The unbounded rest (0, -1) is a loop of another shape, in a family of its own.
        if (a != 0 || b >= 0) g_.set_counted(f->second, {body_family_, a, b, /*any_text=*/true});
      }
      ids.push_back(f->second);
    }
    Symbol quote = lit_byte('"');
    Symbol c = string_char();
    for (std::size_t i = 0; i < chain.size(); ++i) {
      auto [a, b] = chain[i];
      RuleId rule = ids[i];
      if (!g_.alternatives(rule).empty()) continue;
      if (a == 0 && b < 0) {
        // Any number of characters, left recursive: Earley keeps one item at the string's start
        // for the whole string, so the chart (and the mask) is the same after every character
        // (right recursion would add a waiting item per character; matcher.cpp mask_key).
        const RuleId chars = g_.add_rule("chars");
        g_.add_alternative(chars, {});
        g_.add_alternative(chars, {Grammar::rule(chars), c});
        g_.add_alternative(rule, {Grammar::rule(chars), quote});
        continue;
      }
      if (a == 0) g_.add_alternative(rule, {quote});
      if (b != 0) {
        int64_t na = std::max<int64_t>(a - 1, 0), nb = b < 0 ? -1 : b - 1;
        g_.add_alternative(rule, {c, Grammar::rule(bodies_.at({na, nb}))});
      }
    }
    return r;
  }

  // The strings options_.excluded_text allows (valid UTF-8 without that text).
  const Dfa& text_allowed() {
    if (!text_allowed_)
      text_allowed_ = with_dfa("", [&] {
        return schema::complement(schema::containing(options_.excluded_text), dfa_limits_);
      });
    return *text_allowed_;
  }

  RuleId any_string() {
    if (any_string_ >= 0) return any_string_;
    if (!options_.excluded_text.empty()) {
      any_string_ = g_.add_rule("string");
      g_.add_alternative(any_string_, {lit_byte('"'), Grammar::rule(guarded_body(0, -1, /*json=*/true))});
      return any_string_;
    }
    any_string_ = g_.add_rule("string");
    g_.add_alternative(any_string_, {lit_byte('"'), Grammar::rule(string_body(0, -1))});
    return any_string_;
  }

  RuleId digits_rule() {  // [0-9]*
    if (digits_ >= 0) return digits_;
    digits_ = g_.add_rule("digits");  // left recursive, as a free string's characters
    g_.add_alternative(digits_, {});
    g_.add_alternative(digits_, {Grammar::rule(digits_), g_.terminal(ByteSet::range('0', '9'))});
    return digits_;
  }

  // -?(0|[1-9][0-9]*), with the fraction and exponent when `fractions` (or a fraction of zeros
  // when `zero_fraction`); `negative`: the sign.
  RuleId number_rule(bool fractions, bool negative, bool zero_fraction = false) {
    int which = (fractions ? 1 : 0) + (negative ? 2 : 0) + (zero_fraction && !fractions ? 4 : 0);
    if (numbers_[which] >= 0) return numbers_[which];
    RuleId r = g_.add_rule(fractions ? "number" : "integer");
    numbers_[which] = r;
    RuleId mag = g_.add_rule("uint");
    g_.add_alternative(mag, {lit_byte('0')});
    g_.add_alternative(mag, {g_.terminal(ByteSet::range('1', '9')), Grammar::rule(digits_rule())});
    Symbol digit = g_.terminal(ByteSet::range('0', '9'));
    RuleId frac = g_.add_rule("frac");
    g_.add_alternative(frac, {});
    if (fractions) g_.add_alternative(frac, {lit_byte('.'), digit, Grammar::rule(digits_rule())});
    if (zero_fraction && !fractions) {
      RuleId zeros = g_.add_rule("zeros");
      g_.add_alternative(zeros, {});
      g_.add_alternative(zeros, {lit_byte('0'), Grammar::rule(zeros)});
      g_.add_alternative(frac, {lit_byte('.'), lit_byte('0'), Grammar::rule(zeros)});
    }
    RuleId exp = g_.add_rule("exp");
    g_.add_alternative(exp, {});
    if (fractions) {
      ByteSet e;
      e.add('e');
      e.add('E');
      ByteSet sign;
      sign.add('+');
      sign.add('-');
      RuleId sgn = g_.add_rule("expsign");
      g_.add_alternative(sgn, {});
      g_.add_alternative(sgn, {g_.terminal(sign)});
      g_.add_alternative(exp, {g_.terminal(e), Grammar::rule(sgn), digit, Grammar::rule(digits_rule())});
    }
    Sequence body = {Grammar::rule(mag), Grammar::rule(frac), Grammar::rule(exp)};
    g_.add_alternative(r, body);
    if (negative) g_.add_alternative(r, cat({lit_byte('-')}, body));
    return r;
  }

  // Any JSON value, object and array: three mutually recursive rules.
  void build_any() {
    if (any_value_ >= 0) return;
    any_value_ = g_.add_rule("value");
    any_object_ = g_.add_rule("object");
    any_array_ = g_.add_rule("array");
    g_.add_alternative(any_value_, {Grammar::rule(any_object_)});
    g_.add_alternative(any_value_, {Grammar::rule(any_array_)});
    g_.add_alternative(any_value_, {Grammar::rule(any_string())});
    g_.add_alternative(any_value_, {Grammar::rule(number_rule(true, true))});
    for (const char* word : {"true", "false", "null"}) g_.add_alternative(any_value_, lit(word));
    RuleId pair = g_.add_rule("pair");
    g_.add_alternative(pair, {Grammar::rule(any_string()), ws(), lit_byte(':'), ws(), Grammar::rule(any_value_)});
    RuleId rest = g_.add_rule("object_rest");
    g_.add_alternative(rest, {lit_byte('}')});
    g_.add_alternative(rest, {lit_byte(','), ws(), Grammar::rule(pair), ws(), Grammar::rule(rest)});
    g_.add_alternative(any_object_, {lit_byte('{'), ws(), lit_byte('}')});
    g_.add_alternative(any_object_, {lit_byte('{'), ws(), Grammar::rule(pair), ws(), Grammar::rule(rest)});
    RuleId arest = g_.add_rule("array_rest");
    g_.add_alternative(arest, {lit_byte(']')});
    g_.add_alternative(arest, {lit_byte(','), ws(), Grammar::rule(any_value_), ws(), Grammar::rule(arest)});
    g_.add_alternative(any_array_, {lit_byte('['), ws(), lit_byte(']')});
    g_.add_alternative(any_array_, {lit_byte('['), ws(), Grammar::rule(any_value_), ws(), Grammar::rule(arest)});
  }
  RuleId any_value() {
    build_any();
    return any_value_;
  }
  RuleId any_object() {
    build_any();
    return any_object_;
  }
  RuleId any_array() {
    build_any();
    return any_array_;
  }

  RuleId never() {
    if (never_ >= 0) return never_;
    never_ = g_.add_rule("never");
    g_.add_alternative(never_, {g_.terminal(ByteSet{})});
    empty_rules_.insert(never_);
    return never_;
  }

  bool is_empty(RuleId r) const { return empty_rules_.count(r) > 0; }

  // The node's rule.
  RuleId emit(NodeId id) {
    if (id == kAbsent || id == kTrue) return any_value();
    if (id == kFalse) return never();
    id = resolve(id);
    if (id == kTrue) return any_value();
    auto it = rules_.find(id);
    if (it != rules_.end()) return it->second;
    const std::string where = nodes_[static_cast<std::size_t>(id)].where;
    // Emission recurses once per nested schema (a chain of $refs included): bound the stack.
    struct Depth {
      int& d;
      explicit Depth(int& depth) : d(++depth) {}
      ~Depth() { --d; }
    } depth(emit_depth_);
    if (emit_depth_ > 4 * limits_.max_depth) throw CompileError(where, "schemas nest deeper than limits.max_depth allows");
    const std::vector<Simple> simples = flatten(id, 0);
    if (simples.size() == 1 && is_trivial(simples[0])) {
      rules_[id] = any_value();
      return rules_[id];
    }
    RuleId r = g_.add_rule(where.empty() ? "schema" : where);
    rules_[id] = r;
    std::size_t count = 0;
    for (const Simple& s : simples) {
      for (Sequence& alt : emit_simple(s)) {
        g_.add_alternative(r, std::move(alt));
        ++count;
      }
      check_size(s.where);
    }
    if (count == 0) {
      g_.add_alternative(r, {g_.terminal(ByteSet{})});
      empty_rules_.insert(r);
    }
    return r;
  }

  static bool is_trivial(const Simple& s) {
    return s.types == kAllTypes && !s.has_enum && !s.has_string_constraints() && !s.has_number_constraints() &&
           !s.has_array_constraints() && !s.has_object_constraints();
  }

  std::vector<Sequence> emit_simple(const Simple& s) {
    std::vector<Sequence> out;
    if (s.has_enum) {
      std::vector<std::string> strings;
      for (const ojson& v : s.enum_values) {
        if (!validate_simple(v, s, 0)) continue;
        if (v.is_string()) {
          strings.push_back(v.get<std::string>());
        } else {
          out.push_back({Grammar::rule(literal_rule(v, s.types))});
        }
      }
      if (!strings.empty()) out.push_back({Grammar::rule(string_words(strings))});
      return out;
    }
    if (s.types & kNull) out.push_back(lit("null"));
    if (s.types & kBool) {
      out.push_back(lit("true"));
      out.push_back(lit("false"));
    }
    // A type whose constraints leave no value adds no alternative.
    const auto add_unless_empty = [&](RuleId r) {
      if (!is_empty(r)) out.push_back({Grammar::rule(r)});
    };
    if (s.types & kNumber) add_unless_empty(emit_number(s));
    if (s.types & kString) add_unless_empty(emit_string(s));
    if (s.types & kArray) add_unless_empty(emit_array(s));
    if (s.types & kObject) add_unless_empty(emit_object(s));
    return out;
  }

  // A quoted string from a DFA over decoded bytes.
  RuleId quoted(const Dfa& unrestricted, const std::string& name) {
    const Dfa dfa = options_.excluded_text.empty()
                        ? unrestricted
                        : with_dfa(name, [&] { return schema::intersect(unrestricted, text_allowed(), dfa_limits_); });
    if (dfa.empty()) return never();
    RuleId body = schema::emit_dfa(g_, dfa, DfaEncoding::json_string, {lit_byte('"')}, name);
    RuleId r = g_.add_rule(name);
    g_.add_alternative(r, {lit_byte('"'), Grammar::rule(body)});
    return r;
  }

  RuleId string_words(std::vector<std::string> words) {
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    std::string key = ojson(words).dump();
    auto it = words_.find(key);
    if (it != words_.end()) return it->second;
    RuleId r = quoted(with_dfa("", [&] { return schema::words_dfa(words); }),
                      words.size() == 1 ? "\"" + words[0].substr(0, 40) + "\"" : "enum");
    words_[key] = r;
    return r;
  }

  // Only a length bounds the simple's strings (none of the keywords that need an automaton).
  static bool length_only(const Simple& s) {
    return s.patterns.empty() && s.not_patterns.empty() && s.formats.empty() && s.not_words.empty();
  }

  RuleId emit_string(const Simple& s) {
    if (!s.has_string_constraints()) return any_string();
    if (length_only(s)) {
      check_repeat(s.min_length, child(s.where, "minLength"));
      const int64_t max = capped(s.max_length);
      if (max >= 0 && max < s.min_length) return never();
      std::string key = "len" + std::to_string(s.min_length) + "_" + std::to_string(max);
      auto it = strings_rules_.find(key);
      if (it != strings_rules_.end()) return it->second;
      RuleId r = g_.add_rule("string" + std::to_string(s.min_length) + "_" + std::to_string(max));
      const RuleId body = options_.excluded_text.empty() ? string_body(s.min_length, max)
                                                         : guarded_body(s.min_length, max, /*json=*/true);
      g_.add_alternative(r, {lit_byte('"'), Grammar::rule(body)});
      strings_rules_[key] = r;
      return r;
    }
    std::string key = string_key(s);
    auto it = strings_rules_.find(key);
    if (it != strings_rules_.end()) return it->second;
    const Dfa& dfa = string_dfa(s);
    RuleId r = quoted(dfa, child(s.where, "string"));
    strings_rules_[key] = r;
    return r;
  }

  RuleId emit_number(const Simple& s) {
    NumberRange range = number_range(s);
    if (range.empty) return never();
    bool fractions = !range.integer_only;
    // Only non-integers (not {type: integer}): literals with a nonzero fraction digit.
    const bool fraction_only = (s.types & kNumber) == kFrac;
    if (fraction_only && range.integer_only) return never();
    if (!fraction_only && !range.lower && !range.upper && range.multiple == 0)
      return number_rule(fractions, true, range.zero_fraction);
    if (!fraction_only && fractions && range.lower && range.lower->is_zero() && !range.upper && range.multiple == 0)
      return number_rule(true, false);  // x >= 0: every literal without '-'
    schema::NumberSpec spec;
    spec.fraction_required = fraction_only;
    spec.integer_only = range.integer_only;
    spec.zero_fraction = range.zero_fraction;
    spec.lower = range.lower;
    spec.upper = range.upper;
    spec.multiple = range.multiple;
    spec.max_int_digits = range.float_multiple ? 15 : 0;
    std::string key = ojson::array({spec.integer_only, spec.lower ? spec.lower->to_string() : "", spec.upper ? spec.upper->to_string() : "",
                                    spec.multiple, spec.max_int_digits, spec.fraction_required, spec.zero_fraction})
                          .dump();
    auto it = number_rules_.find(key);
    if (it != number_rules_.end()) return it->second;
    Dfa dfa = with_dfa(s.where, [&] { return schema::number_dfa(spec, dfa_limits_); });
    RuleId r = dfa.empty() ? never() : schema::emit_dfa(g_, dfa, DfaEncoding::raw, {}, child(s.where, "number"));
    number_rules_[key] = r;
    return r;
  }

  RuleId emit_array(const Simple& s) {
    NodeId items = s.items == kAbsent ? kTrue : s.items;
    if (s.prefix.empty() && items == kTrue && s.min_items == 0 && s.max_items < 0) return any_array();
    int64_t min = s.min_items, max = capped(s.max_items);
    const int64_t p = static_cast<int64_t>(s.prefix.size());
    std::vector<RuleId> elems;
    for (NodeId e : s.prefix) elems.push_back(emit(e));
    RuleId item_rule = emit(items);
    if (is_empty(item_rule)) max = max < 0 ? p : std::min(max, p);
    for (int64_t i = 0; i < p; ++i)
      if (is_empty(elems[static_cast<std::size_t>(i)])) {
        max = max < 0 ? i : std::min(max, i);
        break;
      }
    if (max >= 0 && min > max) return never();
    check_repeat(min, child(s.where, "minItems"));
    auto elem = [&](int64_t i) { return Grammar::rule(i < p ? elems[static_cast<std::size_t>(i)] : item_rule); };
    RuleId r = g_.add_rule(child(s.where, "array"));
    // rest[i]: after i elements, at ws before ',' or ']'.
    const int64_t k = std::max(p, min);
    const int64_t last = max >= 0 ? max : k;
    std::vector<RuleId> rest(static_cast<std::size_t>(last + 1));
    for (int64_t i = 1; i <= last; ++i) rest[static_cast<std::size_t>(i)] = g_.add_rule(child(s.where, "array") + "." + std::to_string(i));
    for (int64_t i = 1; i <= last; ++i) {
      RuleId ri = rest[static_cast<std::size_t>(i)];
      if (i >= min) g_.add_alternative(ri, {lit_byte(']')});
      if (max < 0 && i == last) {
        g_.add_alternative(ri, {lit_byte(','), ws(), elem(i), ws(), Grammar::rule(ri)});
      } else if (i < last) {
        g_.add_alternative(ri, {lit_byte(','), ws(), elem(i), ws(), Grammar::rule(rest[static_cast<std::size_t>(i + 1)])});
      }
    }
    if (min == 0) g_.add_alternative(r, {lit_byte('['), ws(), lit_byte(']')});
    if (max != 0) {
      RuleId first_rest = last >= 1 ? rest[1] : kAbsent;
      if (first_rest == kAbsent) {  // max < 0 and k == 0: one loop state
        first_rest = g_.add_rule(child(s.where, "array") + ".rest");
        g_.add_alternative(first_rest, {lit_byte(']')});
        g_.add_alternative(first_rest, {lit_byte(','), ws(), elem(1), ws(), Grammar::rule(first_rest)});
      }
      g_.add_alternative(r, {lit_byte('['), ws(), elem(0), ws(), Grammar::rule(first_rest)});
    }
    if (g_.alternatives(r).empty()) return never();
    return r;
  }

  struct PairKind {
    Symbol pair;
    int32_t required_bit = -1;
  };

  RuleId emit_object(const Simple& s) {
    const NodeId additional = effective_additional(s, true);
    if (s.properties.empty() && s.pattern_properties.empty() && s.required.empty() && s.forbidden.empty() &&
        additional == kTrue && s.min_properties <= 0 && s.max_properties < 0)
      return any_object();
    const std::string where = s.where;
    std::set<std::string> forbidden(s.forbidden.begin(), s.forbidden.end());
    struct Entry {
      std::string name;
      NodeId value;
      bool required;
    };
    std::vector<Entry> listed;
    std::set<std::string> names;
    for (const auto& [name, id] : s.properties) {
      (void)id;
      if (forbidden.count(name) || !names.insert(name).second) continue;
      listed.push_back({name, key_schema(s, name, true), false});
    }
    for (const std::string& name : s.required) {
      if (forbidden.count(name)) return never();
      if (names.insert(name).second) listed.push_back({name, key_schema(s, name, true), false});
      for (Entry& e : listed)
        if (e.name == name) e.required = true;
    }
    // Pair kinds for the listed names.
    std::vector<PairKind> kinds;
    int32_t required_count = 0;
    for (const Entry& e : listed) {
      RuleId value = emit(e.value);
      if (is_empty(value)) {
        if (e.required) return never();
        continue;
      }
      RuleId key = string_words({e.name});
      RuleId pair = g_.add_rule(child(where, e.name));
      g_.add_alternative(pair, {Grammar::rule(key), ws(), lit_byte(':'), ws(), Grammar::rule(value)});
      PairKind kind{Grammar::rule(pair), -1};
      if (e.required) kind.required_bit = required_count++;
      kinds.push_back(kind);
    }
    // Pair kinds for the other keys.
    std::vector<std::string> excluded(names.begin(), names.end());
    excluded.insert(excluded.end(), forbidden.begin(), forbidden.end());
    const std::size_t listed_kinds = kinds.size();
    with_dfa(where, [&] {
      auto add_region = [&](const Dfa& keys, NodeId value, bool all_keys) {
        if (keys.empty()) return;
        RuleId v = emit(value);
        if (is_empty(v)) return;
        RuleId key = all_keys ? any_string() : quoted(keys, child(where, "key"));
        RuleId pair = g_.add_rule(child(where, "pair"));
        g_.add_alternative(pair, {Grammar::rule(key), ws(), lit_byte(':'), ws(), Grammar::rule(v)});
        kinds.push_back({Grammar::rule(pair), -1});
      };
      Dfa others = excluded.empty() ? schema::utf8_dfa() : schema::complement(schema::words_dfa(excluded), dfa_limits_);
      const auto& pp = s.pattern_properties;
      if (pp.empty()) {
        if (additional != kFalse) add_region(others, additional, excluded.empty());
        return 0;
      }
      // Per pattern, the keys it surely matches (both regex dialects), may match (one dialect),
      // and surely does not.
      std::vector<const Dfa*> sure;
      std::vector<Dfa> maybe, outside;
      for (const auto& [p, id] : pp) {
        (void)id;
        sure.push_back(&pattern_dfa(p, where, false));
        const Dfa& wide = pattern_dfa(p, where, true);
        maybe.push_back(schema::intersect(wide, schema::complement(*sure.back(), dfa_limits_), dfa_limits_));
        outside.push_back(schema::complement(wide, dfa_limits_));
      }
      // Every combination: a key needs the schema of each pattern that may match it, and
      // additionalProperties' unless some pattern surely matches it.
      int64_t regions = 0, calls = 0;
      std::function<void(std::size_t, const Dfa&, NodeId, bool)> split = [&](std::size_t i, const Dfa& cur, NodeId value,
                                                                             bool claimed) {
        if (cur.empty()) return;
        if (++calls > 100000) throw CompileError(child(where, "patternProperties"), "too many patternProperties");
        if (i == pp.size()) {
          if (++regions > 256) throw CompileError(child(where, "patternProperties"), "too many overlapping patternProperties");
          if (claimed) {
            add_region(cur, value, false);
          } else if (additional != kFalse) {
            add_region(cur, and_node(value, additional), false);
          }
          return;
        }
        split(i + 1, schema::intersect(cur, *sure[i], dfa_limits_), and_node(value, pp[i].second), true);
        if (!maybe[i].empty()) split(i + 1, schema::intersect(cur, maybe[i], dfa_limits_), and_node(value, pp[i].second), claimed);
        split(i + 1, schema::intersect(cur, outside[i], dfa_limits_), value, claimed);
      };
      split(0, others, kTrue, false);
      return 0;
    });
    // Counting.
    int64_t max_props = s.max_properties;
    const bool need_nonempty = s.min_properties > required_count;
    if (s.min_properties > std::max<int64_t>(required_count, 1))
      unsupported(child(where, "minProperties"), "minProperties above the number of required properties (other than 1)");
    if (max_props >= 0 && max_props < required_count) return never();
    const bool counting = max_props >= 0 && (kinds.size() > listed_kinds || max_props < static_cast<int64_t>(listed_kinds));
    const int64_t count_states = counting ? max_props + 1 : 1;
    RuleId obj = g_.add_rule(child(where, "object"));
    const Symbol open = lit_byte('{'), close = lit_byte('}'), comma = lit_byte(',');
    if (required_count == 0 && !need_nonempty) g_.add_alternative(obj, {open, ws(), close});
    if (kinds.empty() || (counting && max_props == 0)) {
      if (g_.alternatives(obj).empty()) return never();
      return obj;
    }
    const int64_t n_kinds = static_cast<int64_t>(kinds.size());
    const bool any_order = required_count <= 12 && (int64_t{1} << required_count) * count_states * n_kinds <= kAnyOrderBudget;
    if (!any_order && (required_count + 1) * count_states * n_kinds > kObjectStateBudget)
      throw CompileError(where, "an object with too many property states for the grammar");
    // Listed properties at most once, where the states allow: seen is then a bitmask over every
    // listed kind (a parser keeping either copy of a repeated key would be valid, but no writer
    // of JSON repeats one, and OpenAI's strict mode never does).
    const auto n_listed = static_cast<int64_t>(listed_kinds);
    const bool distinct = any_order && n_listed <= 12 && (int64_t{1} << n_listed) * count_states * n_kinds <= kAnyOrderBudget;
    int64_t required_mask = 0;
    if (distinct)
      for (int64_t k = 0; k < n_listed; ++k)
        if (kinds[static_cast<std::size_t>(k)].required_bit >= 0) required_mask |= int64_t{1} << k;
    // State (seen, count): seen is a bitmask of the listed pairs seen (distinct), of the required
    // pairs seen (any order), or how many required pairs have come (schema order).
    std::map<std::pair<int64_t, int64_t>, RuleId> states;
    std::vector<std::pair<int64_t, int64_t>> queue;
    auto state = [&](int64_t seen, int64_t c) {
      auto key = std::make_pair(seen, counting ? c : 0);
      auto it = states.find(key);
      if (it != states.end()) return it->second;
      RuleId r = g_.add_rule(child(where, "object") + "." + std::to_string(seen) + "." + std::to_string(key.second));
      states[key] = r;
      queue.push_back(key);
      return r;
    };
    const int64_t full = any_order ? (int64_t{1} << required_count) - 1 : required_count;
    const auto complete = [&](int64_t seen) { return distinct ? (seen & required_mask) == required_mask : seen == full; };
    // The kinds that may come at state `seen`, and the state after each.
    auto moves = [&](int64_t seen, auto&& take) {
      for (int64_t k = 0; k < n_kinds; ++k) {
        const PairKind& kind = kinds[static_cast<std::size_t>(k)];
        if (distinct) {
          if (k >= n_listed) take(kind.pair, seen);
          else if (!((seen >> k) & 1)) take(kind.pair, seen | (int64_t{1} << k));
        } else if (any_order) {
          take(kind.pair, kind.required_bit >= 0 ? (seen | (int64_t{1} << kind.required_bit)) : seen);
        } else if (kind.required_bit < 0) {
          take(kind.pair, seen);
        } else if (kind.required_bit == seen) {
          take(kind.pair, seen + 1);
        }
      }
    };
    // The pairs that may come at a state, after its '{' or ',' and whitespace: one rule, so the
    // separator and the whitespace are one item in the parser, not one per kind (an object of
    // 40 property kinds kept 40 items through each byte of a whitespace run, and the mask walk
    // pays for every item of every column it builds).
    const auto add_pairs = [&](RuleId r, Symbol opening, int64_t seen, int64_t c) {
      std::vector<Sequence> alternatives;
      moves(seen, [&](Symbol pair, int64_t next) { alternatives.push_back({pair, ws(), Grammar::rule(state(next, c + 1))}); });
      if (alternatives.empty()) return;
      const RuleId pairs = g_.add_rule(g_.rule_name(r) + ".pairs");
      for (Sequence& alternative : alternatives) g_.add_alternative(pairs, std::move(alternative));
      g_.add_alternative(r, {opening, ws(), Grammar::rule(pairs)});
    };
    add_pairs(obj, open, 0, 0);
    for (std::size_t head = 0; head < queue.size(); ++head) {
      // Plain copies, not a structured binding: clang 14 cannot capture a binding in a lambda.
      const auto seen = queue[head].first;
      const auto c = queue[head].second;
      RuleId r = states[queue[head]];
      if (complete(seen)) g_.add_alternative(r, {close});
      if (counting && c + 1 > max_props) continue;
      add_pairs(r, comma, seen, c);
      check_size(where);
    }
    for (const auto& [key, r] : states)  // e.g. max pairs reached with a required one missing
      if (g_.alternatives(r).empty()) g_.add_alternative(r, {g_.terminal(ByteSet{})});
    return obj;
  }

  // A rule for one JSON value as a literal (enum / const).
  RuleId literal_rule(const ojson& v, uint32_t types) {
    std::string key = std::to_string(types) + ":" + v.dump();
    auto it = literals_.find(key);
    if (it != literals_.end()) return it->second;
    RuleId r = kAbsent;
    if (v.is_string()) {
      r = string_words({v.get<std::string>()});
    } else {
      r = g_.add_rule("literal");
      if (v.is_null() || v.is_boolean()) {
        g_.add_alternative(r, lit(v.dump()));
      } else if (v.is_number()) {
        std::set<std::string> forms;
        bool integral = integral_number(v);
        bool small = integral && std::fabs(v.get<double>()) < 1e15;
        if (!(types & kFrac)) {
          if (small) forms.insert(v.is_number_float() ? std::to_string(static_cast<int64_t>(v.get<double>())) : v.dump());
          else if (integral && !v.is_number_float()) forms.insert(v.dump());
        } else {
          forms.insert(v.dump());
          if (small) {
            std::string i = v.is_number_float() ? std::to_string(static_cast<int64_t>(v.get<double>())) : v.dump();
            forms.insert(i);
            forms.insert(i + ".0");
          }
        }
        for (const std::string& f : forms) g_.add_alternative(r, lit(f));
        if (forms.empty()) g_.add_alternative(r, {g_.terminal(ByteSet{})});
      } else if (v.is_array()) {
        if (v.empty()) {
          g_.add_alternative(r, {lit_byte('['), ws(), lit_byte(']')});
        } else {
          Sequence seq = {lit_byte('['), ws()};
          for (std::size_t i = 0; i < v.size(); ++i) {
            if (i > 0) seq = cat(seq, {ws(), lit_byte(','), ws()});
            seq.push_back(Grammar::rule(literal_rule(v[i], kAllTypes)));
          }
          seq = cat(seq, {ws(), lit_byte(']')});
          g_.add_alternative(r, std::move(seq));
        }
      } else if (v.is_object()) {
        if (v.empty()) {
          g_.add_alternative(r, {lit_byte('{'), ws(), lit_byte('}')});
        } else {
          std::vector<std::pair<std::string, RuleId>> members;
          for (auto m = v.begin(); m != v.end(); ++m) members.push_back({m.key(), literal_rule(m.value(), kAllTypes)});
          std::vector<std::size_t> order(members.size());
          for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
          do {
            Sequence seq = {lit_byte('{'), ws()};
            for (std::size_t i = 0; i < order.size(); ++i) {
              if (i > 0) seq = cat(seq, {ws(), lit_byte(','), ws()});
              const auto& [name, value] = members[order[i]];
              seq = cat(seq, {Grammar::rule(string_words({name})), ws(), lit_byte(':'), ws(), Grammar::rule(value)});
            }
            seq = cat(seq, {ws(), lit_byte('}')});
            g_.add_alternative(r, std::move(seq));
          } while (members.size() <= 3 && std::next_permutation(order.begin(), order.end()));
        }
      }
    }
    literals_[key] = r;
    return r;
  }

  const ojson& root_;
  const JsonSchemaOptions options_;
  const CompileLimits limits_;
  DfaLimits dfa_limits_;
  int emit_depth_ = 0;
  int draft_ = 0;  // 3, 4, 6, 7, 2019, 2020; 0: not said (read as 2020-12, plus draft 4's tuple items)
  Grammar g_;

  std::vector<Node> nodes_;
  std::vector<Resource> resources_;
  std::unordered_map<const ojson*, int32_t> resource_of_;
  std::map<std::string, std::vector<int32_t>> ids_;
  std::map<std::string, std::vector<Anchor>> anchors_;
  std::unordered_map<const ojson*, NodeId> built_;
  struct Flat {
    bool done = false;
    std::vector<Simple> simples;
  };
  std::unordered_map<NodeId, Flat> flat_;
  std::map<std::pair<NodeId, NodeId>, NodeId> ands_;
  std::map<std::string, Dfa> patterns_, strings_, formats_;

  std::unordered_map<NodeId, RuleId> rules_;
  std::set<RuleId> empty_rules_;
  std::map<std::string, RuleId> words_, strings_rules_, number_rules_, literals_;
  std::map<std::pair<int64_t, int64_t>, RuleId> bodies_;
  std::optional<Dfa> text_allowed_;
  std::optional<Guard> guard_;
  std::map<std::tuple<int64_t, int64_t, int32_t, bool>, RuleId> guarded_;
  std::map<std::pair<int32_t, bool>, int32_t> guarded_families_;  // Grammar::Counted families by guard state
  int32_t body_family_ = -1;                                       // the free string bodies' family
  std::map<std::tuple<std::vector<detail::CodeSet::Range>, bool, bool>, Symbol> guarded_chars_;
  detail::Builder builder_{g_, limits_};
  RuleId escape_ = -1;
  RuleId ws_ = -1, char_ = -1, any_string_ = -1, any_value_ = -1, any_object_ = -1, any_array_ = -1, digits_ = -1,
         never_ = -1;
  RuleId numbers_[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
};

}  // namespace

Grammar compile_json_schema(const nlohmann::json& schema, const JsonSchemaOptions& options, const CompileLimits& limits) {
  return compile_json_schema(nlohmann::ordered_json::parse(schema.dump()), options, limits);
}

Grammar compile_json_schema(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options,
                            const CompileLimits& limits) {
  Compiler compiler(schema, options, limits);
  return compiler.compile();
}

SplitValueGrammars compile_json_schema_split(const nlohmann::ordered_json& document, const std::string& pointer,
                                             const JsonSchemaOptions& options, const CompileLimits& limits) {
  SplitValueGrammars out;
  out.raw_string = Compiler(document, options, limits).raw_strings(pointer);
  out.json_other = Compiler(document, options, limits).non_strings(pointer);
  return out;
}

Grammar any_json(bool object_only, const JsonSchemaOptions& options) {
  static const ojson kEmpty = ojson::object();
  Compiler compiler(kEmpty, options, CompileLimits{});
  return compiler.any(object_only);
}

}  // namespace deepinfer::grammar

#pragma once
// The compilers from each constraint language to a Grammar (grammar.h). Each refuses what it
// cannot enforce exactly with a CompileError naming where (a byte offset in the source text, or a
// JSON pointer into the schema) and why, and stops at the limits below instead of running away
// on pathological input (deep nesting, huge alternations, repetition counts that explode).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

// A constraint that cannot be compiled: `where` is "at byte N" or a JSON pointer ("/properties/a").
class CompileError : public Error {
 public:
  CompileError(std::string where, const std::string& reason)
      : Error(where.empty() ? reason : where + ": " + reason), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

// A compile that ran past its wall-clock bound (CompileDeadline). Not a CompileError: it says
// nothing about the input (the same constraint may compile on a less loaded server), so callers
// must not cache it as the constraint's verdict, and no compiler's "try another way" catch of a
// CompileError may swallow it.
class CompileTimeout : public Error {
 public:
  explicit CompileTimeout(std::chrono::milliseconds bound);
  std::chrono::milliseconds bound() const { return bound_; }

 private:
  std::chrono::milliseconds bound_;
};

// A wall-clock bound on one compile, checked cooperatively where the compilers and prepare()
// loop (each alternative added, each automaton state, each pass over the rules): past it,
// check() throws CompileTimeout. One compile, one thread: not shared between threads.
class CompileDeadline {
 public:
  explicit CompileDeadline(std::chrono::milliseconds bound)
      : bound_(bound), at_(std::chrono::steady_clock::now() + bound) {}
  // Reads the clock every kStride calls: the checks sit in loops whose bodies are a few
  // hundred nanoseconds, where a clock read each time would be a visible share.
  void check() const {
    if (++calls_ % kStride == 0 && std::chrono::steady_clock::now() >= at_) throw CompileTimeout(bound_);
  }
  std::chrono::milliseconds bound() const { return bound_; }
  std::chrono::steady_clock::time_point at() const { return at_; }

 private:
  static constexpr uint32_t kStride = 64;
  std::chrono::milliseconds bound_;
  std::chrono::steady_clock::time_point at_;
  mutable uint32_t calls_ = 0;
};

struct CompileLimits {
  int64_t max_symbols = int64_t{1} << 20;  // Grammar::size()
  int32_t max_depth = 32;                  // nesting of groups, subschemas, $ref expansions (each level
                                           // costs compiler stack: 32 stays far inside a thread stack,
                                           // sanitizer builds included)
  int64_t max_repeat = 10000;              // the largest {n,m} / minItems / maxLength expanded
  // Memory: the grammar, its prepared tables (prepare) and each automaton the JSON schema
  // compiler builds, in bytes (estimated from their element counts).
  int64_t max_bytes = int64_t{256} << 20;
  // Wall clock: none means unbounded (tests, the CLI); the server passes one per compile.
  const CompileDeadline* deadline = nullptr;

  void check_deadline() const {
    if (deadline) deadline->check();
  }
};

// An ECMAScript regular expression (the subset JSON Schema's `pattern` uses), matched against
// the whole output. Supported: literals and escapes (\d \w \s \D \W \S \t \n \r \f \v \0 \xHH
// \uHHHH \u{...} and escaped metacharacters), `.` (any character but \n and \r), classes [...] and
// [^...] with ranges, groups ( ), (?: ), alternation |, quantifiers * + ? {n} {n,} {n,m} (greedy
// and lazy: the same language), and ^ / $ at the ends. Characters are UTF-8: `.` and negated
// classes match whole code points. `anchored`: the pattern must match the whole output (JSON
// Schema's `pattern` is not anchored, so its compiler passes false and gets .* around it).
// Refused (CompileError): backreferences, lookaround, \b \B, flags, ^ / $ inside the pattern.
Grammar compile_regex(std::string_view pattern, bool anchored = true, const CompileLimits& limits = {});

struct JsonSchemaOptions {
  // Objects without "additionalProperties" allow extra keys (the spec's default) unless strict.
  bool strict = false;
  // Keywords that cannot be enforced are not enforced instead of refused; each is listed in the
  // grammar's relaxations (Grammar::relaxations), for the caller to report. A schema can ask for
  // it itself: "x-guidance": {"lenient": true} at its root (llguidance's convention).
  bool lenient = false;
  // Whitespace between tokens: at most this many bytes in a run (bounded, so a model cannot pad
  // forever; vLLM's fix). Compact and pretty-printed JSON both fit the default.
  int32_t max_whitespace = 20;
  // No string, value or key, contains this text (decoded): JSON written inside markup whose
  // closing tag must not appear in it. Empty: no such text.
  std::string excluded_text;
};

// A JSON schema (drafts 4 to 2020-12: the keywords docs/STRUCTURED.md lists) to the grammar of
// the JSON texts it accepts. Unsupported keywords are a CompileError with their JSON pointer
// unless lenient. The root's "x-guidance" object may set `lenient` and `whitespace_flexible`
// (false: compact JSON, no whitespace between tokens); another key there is a CompileError.
Grammar compile_json_schema(const nlohmann::json& schema, const JsonSchemaOptions& options = {},
                            const CompileLimits& limits = {});
// The same for a schema parsed with its key order kept: `properties` in the schema's own order
// (nlohmann::json sorts keys), which the grammar follows where it fixes an order.
Grammar compile_json_schema(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {},
                            const CompileLimits& limits = {});

// One subschema's values for a format that writes a string value as itself and any other value
// as JSON text (DeepSeek's DSML tool-call parameters, string="true" / string="false").
struct SplitValueGrammars {
  // The string values the subschema accepts, as their UTF-8 bytes (no quotes, no escapes), none
  // containing options.excluded_text; none when no such string is accepted.
  std::optional<Grammar> raw_string;
  // The JSON texts of the non-string values it accepts; none when it accepts strings only.
  std::optional<Grammar> json_other;
};
// The subschema at JSON pointer `pointer` ("" the root, "/properties/city") of `document`, whose
// $refs resolve against the whole document. Both grammars are none when the subschema accepts
// nothing; a CompileError for what compile_json_schema refuses (`where`: a pointer into `document`).
SplitValueGrammars compile_json_schema_split(const nlohmann::ordered_json& document, const std::string& pointer,
                                             const JsonSchemaOptions& options = {}, const CompileLimits& limits = {});

// Any valid UTF-8 text that does not contain `excluded` (free text beside a marker that must
// not start inside it).
Grammar text_without(std::string_view excluded);

// Any JSON value (response_format json_object: an object).
Grammar any_json(bool object_only, const JsonSchemaOptions& options = {});

// llama.cpp's GBNF (grammars/README.md): `name ::= alternatives`, "literals", [classes],
// (groups), * + ? {n,m}, comments; the start rule is `root`.
Grammar compile_gbnf(std::string_view text, const CompileLimits& limits = {});

// The Lark form llguidance takes: `name: alternatives`, "literals", /regex/ terminals, [optional],
// (groups), * + ?, `%ignore` refused; the start rule is `start`.
Grammar compile_lark(std::string_view text, const CompileLimits& limits = {});

}  // namespace deepinfer::grammar

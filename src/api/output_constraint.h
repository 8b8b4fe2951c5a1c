#pragma once
// Structured output requests, as clients send them, to the engine's grammar constraint: OpenAI's
// response_format (json_schema, json_object), vLLM's structured_outputs (json, regex, choice,
// grammar, json_object) and SGLang's regex / ebnf fields all become one ConstraintSpec; compiling
// it (grammar/compile.h) is the server's, with the tokenizer and a cache (ConstraintCompiler).
// A constraint that cannot be enforced exactly is a 400 naming where and why, never ignored.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/tool_call_grammar.h"
#include "engine/sampling_params.h"
#include "grammar/compile.h"
#include "grammar/jump_forward.h"
#include "grammar/matcher.h"

namespace deepinfer::api {

struct ConstraintSpec {
  enum class Kind { JsonSchema, JsonObject, Regex, Gbnf, Lark, Choice, ToolCalls };
  Kind kind = Kind::JsonObject;
  nlohmann::ordered_json schema;     // JsonSchema (ordered: the properties' order is the schema's)
  std::string text;                  // Regex, Gbnf, Lark
  std::vector<std::string> choices;  // Choice: the output is exactly one of them
  bool strict = false;               // JsonSchema: no keys beyond `properties`
  bool compact = false;              // JsonSchema, JsonObject: no whitespace between tokens
  std::string field;                 // the request field it came from, for 400s
  std::shared_ptr<const ToolCallSpec> tool_calls;  // ToolCalls (tool_call_constraint.h makes one)
  // ToolCalls in Optional mode: the constraint on an answer that is not a tool call (a
  // response_format); none: free text.
  std::shared_ptr<const ConstraintSpec> answer;
};

// One constraint per request: a second one is a 400 naming both fields.
void set_constraint(std::optional<ConstraintSpec>& slot, ConstraintSpec spec);

struct ConstraintCompilerOptions {
  std::size_t capacity = 256;  // compiled constraints kept; the oldest go beyond it
  // The cache's memory: each entry counts its prepared grammar and its mask cache's bound; the
  // oldest go beyond it.
  int64_t cache_bytes = int64_t{1} << 30;
  // One compile's bounds: wall clock (0: none) and memory (grammar::CompileLimits::max_bytes).
  std::chrono::milliseconds timeout{10000};
  int64_t max_grammar_bytes = grammar::CompileLimits{}.max_bytes;
  // Compiles running at once (each takes a core); one waiting for a slot waits within its time
  // bound, and past it is a timeout like any other. 0: the machine's hardware threads.
  int max_concurrent_compiles = 0;
};

// Compiled constraints by content, shared across requests (a schema sent with every request of a
// client compiles once). Thread-safe and single-flight: requests that bring the same new
// constraint while it compiles wait for that one compile. A refusal (the constraint cannot be
// enforced, or exceeds a size bound) is the input's verdict and is cached like a grammar; a
// compile past the time bound is not (the next request with it compiles again).
class ConstraintCompiler {
 public:
  // `encode` (the vocabulary's tokenizer) goes into every constraint for jump-forward; empty:
  // the engine draws every token.
  explicit ConstraintCompiler(std::shared_ptr<const grammar::Vocabulary> vocabulary,
                              ConstraintCompilerOptions options = {}, grammar::TextEncoder encode = {});

  // The engine's constraint; the grammar applies after `after_token` (-1: from the start).
  // Throws ApiError 400 naming spec.field (the compile error's place and reason, a size bound,
  // or the time bound) for what cannot be enforced. Compiles on the calling thread.
  engine::OutputConstraint compile(const ConstraintSpec& spec, int32_t after_token);

  struct Stats {
    int64_t compilations = 0;      // compiles started
    int64_t hits = 0;              // answered from a finished entry (a grammar or a refusal)
    int64_t waits = 0;             // joined a compile in progress
    int64_t timeouts = 0;          // compiles stopped by the time bound
    int64_t entries = 0;           // in the cache now, compiles in progress included
    int64_t bytes = 0;             // what the finished entries count against cache_bytes
  };
  Stats stats() const;
  // Tests: runs on the compiling thread before each compile, holding its slot (to keep one in
  // progress).
  void set_compile_hook(std::function<void()> hook) { compile_hook_ = std::move(hook); }

 private:
  using Compiled = std::shared_ptr<const grammar::CompiledGrammar>;
  struct Entry {
    std::shared_future<Compiled> result;  // a grammar, or the ApiError refusing the constraint
    std::list<std::string>::iterator position;  // in order_
    bool done = false;
    int64_t bytes = 0;
  };
  // One of compile_slots_, held for a compile; waits for one until `deadline` (none: forever),
  // then throws grammar::CompileTimeout.
  class CompileSlot {
   public:
    CompileSlot(ConstraintCompiler& compiler, const grammar::CompileDeadline* deadline);
    ~CompileSlot();
    CompileSlot(const CompileSlot&) = delete;
    CompileSlot& operator=(const CompileSlot&) = delete;

   private:
    ConstraintCompiler& compiler_;
  };
    Compiled compile_new(const ConstraintSpec& spec, const std::string& key, std::promise<Compiled>& promise);
  void finish(const std::string& key, int64_t bytes);  // under mutex_
  void evict();                                        // under mutex_

  std::shared_ptr<const grammar::Vocabulary> vocabulary_;
  ConstraintCompilerOptions options_;
  grammar::TextEncoder encode_;
  std::function<void()> compile_hook_;
  int compile_slots_;
  mutable std::mutex mutex_;
  std::condition_variable slot_freed_;
  int compiles_running_ = 0;
  std::list<std::string> order_;  // oldest first
  std::unordered_map<std::string, Entry> cache_;
  Stats stats_;
};

// The grammar of `spec` (uncached; ConstraintCompiler::compile's work) within `limits`. Throws
// grammar::CompileError, grammar::CompileTimeout, or for ToolCalls an ApiError naming the tool or
// answer field at fault.
grammar::Grammar constraint_grammar(const ConstraintSpec& spec, const grammar::CompileLimits& limits = {});

}  // namespace deepinfer::api

#include "api/output_constraint.h"

#include <algorithm>
#include <thread>

#include "api/api_error.h"
#include "api/dsml_tags.h"
#include "core/error.h"

namespace deepinfer::api {
namespace {

const char* kind_name(ConstraintSpec::Kind kind) {
  switch (kind) {
    case ConstraintSpec::Kind::JsonSchema: return "json_schema";
    case ConstraintSpec::Kind::JsonObject: return "json_object";
    case ConstraintSpec::Kind::Regex: return "regex";
    case ConstraintSpec::Kind::Gbnf: return "gbnf";
    case ConstraintSpec::Kind::Lark: return "lark";
    case ConstraintSpec::Kind::Choice: return "choice";
    case ConstraintSpec::Kind::ToolCalls: return "tool_calls";
  }
  return "?";
}

// The cache key: the kind, the options that change the grammar, the source, and the request
// fields it came from: a cached refusal names them (the same schema as an OpenAI tool's
// `function.parameters` and an Anthropic tool's `input_schema` is refused in different words).
std::string cache_key(const ConstraintSpec& spec) {
  std::string key = kind_name(spec.kind);
  key += "/" + nlohmann::json(spec.field).dump();
  key += spec.strict ? "/strict" : "";
  key += spec.compact ? "/compact/" : "/";
  switch (spec.kind) {
    case ConstraintSpec::Kind::JsonSchema: key += spec.schema.dump(); break;
    case ConstraintSpec::Kind::Choice: key += nlohmann::json(spec.choices).dump(); break;
    case ConstraintSpec::Kind::ToolCalls: {
      const ToolCallSpec& calls = *spec.tool_calls;
      nlohmann::ordered_json tools = nlohmann::ordered_json::array();
      for (const ToolCallSpec::Tool& tool : calls.tools)
        tools.push_back({tool.name, tool.field, tool.parameters, tool.strict, tool.constrained});
      key += nlohmann::ordered_json{calls.mode == ToolCallSpec::Mode::Forced, calls.single_call,
                                    calls.format == PromptFormat::V4, calls.from_reasoning, tools}
                 .dump();
      if (spec.answer) key += "/answer/" + cache_key(*spec.answer);
      break;
    }
    default: key += spec.text; break;
  }
  return key;
}

// The grammar of `spec`; `excluded_text`: text no JSON string may contain (an answer beside a
// tool-call block must not open one inside its strings).
grammar::Grammar grammar_of(const ConstraintSpec& spec, const std::string& excluded_text,
                            const grammar::CompileLimits& limits);

// An answer's grammar beside a tool-call block, its compile errors named after its own field.
grammar::Grammar answer_grammar(const ConstraintSpec& answer, const grammar::CompileLimits& limits) {
  try {
    return grammar_of(answer, std::string(dsml::kOpenPrefix), limits);
  } catch (const grammar::CompileError& error) {
    throw ApiError(400, str_cat(answer.field, ": ", error.what()), answer.field);
  }
}

grammar::Grammar grammar_of(const ConstraintSpec& spec, const std::string& excluded_text,
                            const grammar::CompileLimits& limits) {
  grammar::JsonSchemaOptions json_options;
  json_options.excluded_text = excluded_text;
  if (spec.compact) json_options.max_whitespace = 0;
  switch (spec.kind) {
    case ConstraintSpec::Kind::JsonSchema: {
      json_options.strict = spec.strict;
      grammar::Grammar compiled = grammar::compile_json_schema(spec.schema, json_options, limits);
      compiled.name_relaxations(spec.field);
      return compiled;
    }
    case ConstraintSpec::Kind::JsonObject: return grammar::any_json(/*object_only=*/true, json_options);
    case ConstraintSpec::Kind::Regex: return grammar::compile_regex(spec.text, /*anchored=*/true, limits);
    case ConstraintSpec::Kind::Gbnf: return grammar::compile_gbnf(spec.text, limits);
    case ConstraintSpec::Kind::Lark: return grammar::compile_lark(spec.text, limits);
    case ConstraintSpec::Kind::Choice: {
      if (spec.choices.empty()) throw grammar::CompileError("", "choice: the list is empty");
      grammar::Grammar g;
      const grammar::RuleId start = g.add_rule("choice");
      for (const std::string& choice : spec.choices) {
        limits.check_deadline();
        g.add_alternative(start, g.literal(choice));
        if (g.size() > limits.max_symbols || g.bytes() > limits.max_bytes)
          throw grammar::CompileError("", str_cat("choice: the choices need more than ", limits.max_symbols,
                                                  " symbols or ", limits.max_bytes, " bytes"));
      }
      g.set_start(start);
      return g;
    }
    case ConstraintSpec::Kind::ToolCalls: {
      if (!spec.answer) return tool_call_grammar(*spec.tool_calls, nullptr, limits);
      const grammar::Grammar answer = answer_grammar(*spec.answer, limits);
      return tool_call_grammar(*spec.tool_calls, &answer, limits);
    }
  }
  throw grammar::CompileError("", "unknown constraint kind");
}

}  // namespace

void set_constraint(std::optional<ConstraintSpec>& slot, ConstraintSpec spec) {
  if (slot)
    throw ApiError(400, str_cat("only one output constraint per request: ", slot->field, " and ", spec.field,
                                " were both given"),
                   spec.field);
  slot = std::move(spec);
}

grammar::Grammar constraint_grammar(const ConstraintSpec& spec, const grammar::CompileLimits& limits) {
  return grammar_of(spec, "", limits);
}

ConstraintCompiler::ConstraintCompiler(std::shared_ptr<const grammar::Vocabulary> vocabulary,
                                       ConstraintCompilerOptions options, grammar::TextEncoder encode)
    : vocabulary_(std::move(vocabulary)),
      options_(options),
      encode_(std::move(encode)),
      compile_slots_(options.max_concurrent_compiles > 0
                         ? options.max_concurrent_compiles
                         : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {}

engine::OutputConstraint ConstraintCompiler::compile(const ConstraintSpec& spec, int32_t after_token) {
  const std::string key = cache_key(spec);
  std::shared_future<Compiled> pending;
  std::promise<Compiled> promise;
  {
    const std::lock_guard lock(mutex_);
    if (const auto found = cache_.find(key); found != cache_.end()) {
      ++(found->second.done ? stats_.hits : stats_.waits);
      pending = found->second.result;
    } else {
      order_.push_back(key);
      cache_.emplace(key, Entry{promise.get_future().share(), std::prev(order_.end())});
      ++stats_.compilations;
    }
  }
  // A refusal comes back as the ApiError the compile threw; so does a timeout, to the requests
  // that waited for that compile.
  const Compiled compiled = pending.valid() ? pending.get() : compile_new(spec, key, promise);
  return engine::OutputConstraint{compiled, vocabulary_, after_token, encode_};
}

ConstraintCompiler::Compiled ConstraintCompiler::compile_new(const ConstraintSpec& spec, const std::string& key,
                                                             std::promise<Compiled>& promise) {
  // The verdict for this content, kept in the cache: a refusal is as much the input's as a grammar.
  const auto refuse = [&](const ApiError& error) {
    promise.set_exception(std::make_exception_ptr(error));
    const std::lock_guard lock(mutex_);
    finish(key, static_cast<int64_t>(key.size() + std::string_view(error.what()).size()));
  };
  // Not the input's verdict (the time bound, or an error of ours): the entry goes, so the next
  // request with this content compiles again.
  const auto forget = [&](std::exception_ptr error) {
    promise.set_exception(error);
    const std::lock_guard lock(mutex_);
    if (const auto found = cache_.find(key); found != cache_.end()) {
      order_.erase(found->second.position);
      cache_.erase(found);
    }
  };
  // Every way out of here sets the promise: an entry left pending would hang its waiters.
  Compiled compiled;
  try {
    // The bound starts now: a compile that waits for a slot waits within it.
    const std::optional<grammar::CompileDeadline> deadline =
        options_.timeout.count() > 0 ? std::optional<grammar::CompileDeadline>(options_.timeout) : std::nullopt;
    const CompileSlot slot(*this, deadline ? &*deadline : nullptr);
    if (compile_hook_) compile_hook_();
    grammar::CompileLimits limits;
    limits.max_bytes = options_.max_grammar_bytes;
    limits.deadline = deadline ? &*deadline : nullptr;
    compiled = grammar::prepare(constraint_grammar(spec, limits), limits);
  } catch (const grammar::CompileError& error) {
    const ApiError refusal(400, str_cat(spec.field, ": ", error.what()), spec.field);
    refuse(refusal);
    throw refusal;
  } catch (const ApiError& error) {
    if (error.status() != 400) {
      forget(std::current_exception());
      throw;
    }
    refuse(error);
    throw;
  } catch (const grammar::CompileTimeout& error) {
    const ApiError timeout(400, str_cat(spec.field, ": ", error.what()), spec.field);
    {
      const std::lock_guard lock(mutex_);
      ++stats_.timeouts;
    }
    forget(std::make_exception_ptr(timeout));
    throw timeout;
  } catch (...) {
    forget(std::current_exception());
    throw;
  }
  promise.set_value(compiled);
  const std::lock_guard lock(mutex_);
  finish(key, grammar::prepared_bytes(*compiled) + grammar::mask_cache_bytes(vocabulary_ ? vocabulary_->size() : 0) +
                  static_cast<int64_t>(key.size()));
  return compiled;
}

ConstraintCompiler::CompileSlot::CompileSlot(ConstraintCompiler& compiler, const grammar::CompileDeadline* deadline)
    : compiler_(compiler) {
  std::unique_lock lock(compiler_.mutex_);
  const auto has_free_slot = [&] { return compiler_.compiles_running_ < compiler_.compile_slots_; };
  if (!deadline) {
    compiler_.slot_freed_.wait(lock, has_free_slot);
  } else if (!compiler_.slot_freed_.wait_until(lock, deadline->at(), has_free_slot)) {
    throw grammar::CompileTimeout(deadline->bound());
  }
  ++compiler_.compiles_running_;
}

ConstraintCompiler::CompileSlot::~CompileSlot() {
  {
    const std::lock_guard lock(compiler_.mutex_);
    --compiler_.compiles_running_;
  }
  compiler_.slot_freed_.notify_one();
}

void ConstraintCompiler::finish(const std::string& key, int64_t bytes) {
  const auto found = cache_.find(key);
  if (found == cache_.end()) return;
  found->second.done = true;
  found->second.bytes = bytes;
  stats_.bytes += bytes;
  evict();
}

void ConstraintCompiler::evict() {
  // Oldest first, finished entries only: a compile in progress has requests waiting on it.
  for (auto position = order_.begin();
       position != order_.end() && (cache_.size() > options_.capacity || stats_.bytes > options_.cache_bytes);) {
    const auto found = cache_.find(*position);
    if (!found->second.done) {
      ++position;
      continue;
    }
    stats_.bytes -= found->second.bytes;
    cache_.erase(found);
    position = order_.erase(position);
  }
}

ConstraintCompiler::Stats ConstraintCompiler::stats() const {
  const std::lock_guard lock(mutex_);
  Stats out = stats_;
  out.entries = static_cast<int64_t>(cache_.size());
  return out;
}

}  // namespace deepinfer::api

#pragma once
// Everything `deepinfer serve` can set about the HTTP side and the engine behind it.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "api/output_constraint.h"
#include "engine/engine.h"
#include "model/model.h"

namespace deepinfer::server {

struct ServerOptions {
  std::string model_dir;
  std::string tokenizer;          // tokenizer.json; empty: the model folder's, else the bundled V4.1 one
  std::string served_model_name;  // empty: the model folder's name
  std::string host = "127.0.0.1";
  int port = 8000;                // 0: any free port (Server::port() tells which)
  // Threads that parse requests and prepare their prompts (JSON, rendering, tokenizing,
  // constraint compiles). Connections and streams hold none: an event loop serves them.
  int http_threads = 32;
  // Open connections at most; one more is answered 503 and closed at once. 0: what the
  // process's file limit allows (RLIMIT_NOFILE, raised to its hard limit at start) less 64.
  int64_t max_connections = 0;
  // A request's head must arrive within this of its first byte (or of the connection's start),
  // and a body may not stall longer (408, then the connection closes).
  std::chrono::milliseconds header_timeout{10'000};
  // A keep-alive connection idle this long between requests is closed.
  std::chrono::milliseconds keep_alive_timeout{5'000};
  // SIGTERM: running requests may finish for this long, then the rest are cancelled.
  std::chrono::milliseconds shutdown_timeout{30'000};
  // Bounds on a request's head (431 past them).
  int64_t max_header_bytes = 64 << 10;
  int64_t max_header_count = 128;
  // max_tokens of a request that names none; none: the rest of the context.
  std::optional<int64_t> default_max_tokens;
  std::string api_key;            // non-empty: every /v1 request needs "Authorization: Bearer <key>"
  bool cors = false;              // Access-Control-Allow-Origin: * and preflight answers
  int64_t max_body_bytes = 8 << 20;  // larger request bodies get 413 (Content-Length or chunked)
  std::optional<int64_t> max_model_len;  // prompt + max_tokens limit; none: what model and cache allow
  // --speculative; none: scheduled when the model has a DSpark drafter, else off.
  std::optional<engine::SpeculativeMode> speculative;
  engine::EngineOptions engine;
  // Structured output: the bounds on compiling one constraint and the compiled-constraint cache.
  api::ConstraintCompilerOptions constraints;
  // One line per finished request (structured: key=value pairs). Empty: stderr.
  std::function<void(const std::string&)> log;
  // Called once with the loaded model, before the engine starts: where the command line puts it
  // on its device (`deepinfer serve --device`, backend::attach_device), so the server itself
  // depends on no backend. Empty: the model runs where it loaded (the CPU).
  std::function<void(model::Model&)> on_model_loaded;
};

}  // namespace deepinfer::server

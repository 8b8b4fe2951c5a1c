#pragma once
// Everything `deepinfer serve` can set about the HTTP side and the engine behind it.
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
  // Each streaming response holds one HTTP worker for its whole length, so this bounds the
  // number of concurrent connections; requests beyond it wait in the socket backlog.
  int http_threads = 512;
  std::string api_key;            // non-empty: every /v1 request needs "Authorization: Bearer <key>"
  bool cors = false;              // Access-Control-Allow-Origin: * and preflight answers
  int64_t max_body_bytes = 8 << 20;  // larger request bodies get 413
  std::optional<int64_t> max_model_len;  // prompt + max_tokens limit; none: what model and cache allow
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

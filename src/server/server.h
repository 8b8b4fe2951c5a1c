#pragma once
// The HTTP server: routes, API key, CORS, error objects, and its life cycle (bind, serve, drain
// on shutdown). Endpoint semantics live in the handlers (handlers.h); connections, limits and
// deadlines in the listener (http_listener.h).
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "server/http_listener.h"
#include "server/metrics.h"
#include "server/served_model.h"
#include "server/server_options.h"

namespace deepinfer::server {

class Server {
 public:
  // Loads the model and starts the engine; raises the process's open-file limit to its hard
  // limit (every connection is a descriptor); throws deepinfer::Error.
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds options.host:options.port (port 0: any free port) and returns the port; throws
  // deepinfer::Error when the address cannot be bound.
  int bind();
  // Serves until shutdown(); call after bind().
  void serve();
  // Refuses new generation requests (503) and lets the running ones finish for up to
  // options.shutdown_timeout, then cancels what remains, closes every connection and stops
  // serve(). Returns when done. Safe to call from any thread, more than once (later calls
  // return at once).
  void shutdown();

  int port() const { return port_; }
  ServedModel& model() { return *model_; }
  const ServerOptions& options() const { return options_; }
  // The connection limit in force (options.max_connections, or what the file limit allows).
  int64_t max_connections() const { return max_connections_; }
  ListenerStats connection_stats() const { return listener_->stats(); }

 private:
  ServerOptions options_;
  std::unique_ptr<ServedModel> model_;
  Metrics metrics_;
  int64_t max_connections_ = 0;
  std::unique_ptr<HttpListener> listener_;
  std::atomic<bool> draining_{false};
  int port_ = -1;
};

}  // namespace deepinfer::server

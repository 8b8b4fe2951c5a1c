#pragma once
// The HTTP server: routes, API key, CORS, body limit, error objects, and its life cycle
// (bind, serve, drain on shutdown). Endpoint semantics live in the handlers (handlers.h).
#include <atomic>
#include <memory>
#include <string>

#include "server/metrics.h"
#include "server/served_model.h"
#include "server/server_options.h"

namespace httplib {
class Server;
}

namespace deepinfer::server {

class Server {
 public:
  // Loads the model and starts the engine; throws deepinfer::Error.
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds options.host:options.port (port 0: any free port) and returns the port; throws
  // deepinfer::Error when the address cannot be bound.
  int bind();
  // Serves until shutdown(); call after bind().
  void serve();
  // Refuses new generation requests (503), lets the running ones finish, then stops serve().
  // Safe to call from any thread, more than once.
  void shutdown();

  int port() const { return port_; }
  ServedModel& model() { return *model_; }
  const ServerOptions& options() const { return options_; }

 private:
  void install_routes();

  ServerOptions options_;
  std::unique_ptr<ServedModel> model_;
  Metrics metrics_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<bool> draining_{false};
  int port_ = -1;
};

}  // namespace deepinfer::server

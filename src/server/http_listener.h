#pragma once
// The HTTP/1.1 side of the server: an event loop (Boost.Asio, in http_listener.cpp only) that
// owns the listening socket and every connection. No thread is held by a connection or a
// stream: requests are parsed as their bytes arrive (http_parser.h, limits enforced there),
// complete requests go to the handler (on a small worker pool, or on the loop for cheap routes),
// and generated answers are written as the engine produces them, each write awaited, so a slow
// reader only slows its own stream. Each connection keeps a read pending while its request is
// served, so a client that resets or closes is seen at once and its request abandoned (a
// half-closed client, which only shut its sending side, is told apart by a probe and answered).
//
// Deadlines: the head of a request within header_timeout of its first byte (of the connection's
// start for the first request; a body may not stall longer either): 408 and close; a keep-alive
// connection idle for keep_alive_timeout: closed; a write that does not complete within
// write_timeout: the client is treated as gone. Connections past max_connections get 503 and
// are closed at once.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "server/http_message.h"
#include "server/http_parser.h"

namespace deepinfer::server {

struct ListenerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int64_t max_connections = 1024;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds keep_alive_timeout{5'000};
  std::chrono::milliseconds write_timeout{60'000};
  HttpLimits limits;
  int worker_threads = 8;  // run Callbacks::handle for requests not answered on the loop
  int io_threads = 1;      // run the event loop
};

struct ListenerStats {
  int64_t open_connections = 0;
  int64_t busy_connections = 0;  // serving a request
  int64_t accepted_total = 0;
  int64_t refused_total = 0;     // past max_connections
  int64_t timeouts_total = 0;    // header, body, or write deadline passed
  int64_t client_gone_total = 0; // a request abandoned because its client left
};

class HttpListener {
 public:
  struct Callbacks {
    // Once a request's head is complete, before its body is read: true when `response` now
    // holds the answer (unknown path or method, a missing API key, ...). The body is then not
    // read (the connection closes after the answer unless the body had already arrived).
    std::function<bool(const HttpRequest&, HttpResponse&)> refuse_head;
    // Whether a complete request is cheap enough to answer on the event loop (/health, /metrics).
    std::function<bool(const HttpRequest&)> answer_inline;
    // Answers a complete request: a body, or a producer (http_message.h). Must not throw.
    std::function<void(HttpRequest&, HttpResponse&)> handle;
    // The error response for what the HTTP layer refuses itself (400, 408, 413, 431, 501, 503, 505).
    std::function<void(const std::string& path, int status, const std::string& message, HttpResponse&)> http_error;
    // Called on every response before it goes out (CORS headers).
    std::function<void(HttpResponse&)> decorate;
  };

  HttpListener(ListenerOptions options, Callbacks callbacks);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Binds and listens (backlog SOMAXCONN); returns the port. Throws deepinfer::Error.
  int bind();
  // Accepts and serves until stop(); the calling thread runs the event loop (with
  // io_threads - 1 more).
  void run();
  // Waits until no connection is serving a request, or until `deadline`; whether it became idle.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  // Stops accepting and closes every connection (requests still being served are abandoned);
  // run() returns soon after. Safe from any thread, more than once.
  void stop();
  ListenerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer::server

#pragma once
// HTTP/1.1 from the data-parallel front to its engine ranks, each a `deepinfer serve` on a
// loopback port. One event loop thread of its own (Boost.Asio and Beast's response parser stay
// in upstream_client.cpp); keep-alive connections pooled per port; an answer's bytes reach the
// observer as they arrive, so a proxied stream flows token by token and holds no thread.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http_message.h"

namespace deepinfer::server {

struct UpstreamHead {
  int status = 0;
  std::string content_type;
  // Besides Content-Type and the hop-by-hop fields (Connection, Content-Length, Transfer-Encoding, ...).
  std::vector<std::pair<std::string, std::string>> headers;
};

// Called on the client's loop thread, in this order: on_head once (unless the exchange failed
// first), on_body for each run of body bytes, then on_end once: "" when the answer is complete,
// else what went wrong. They must only record and signal.
struct UpstreamObserver {
  std::function<void(UpstreamHead)> on_head;
  std::function<void(std::string_view)> on_body;
  std::function<void(const std::string& error)> on_end;
};

class UpstreamCall {
 public:
  virtual ~UpstreamCall() = default;
  // From any thread: close the connection (the rank sees its client leave and cancels the
  // request). on_end follows unless it already came.
  virtual void cancel() = 0;
};

class UpstreamClient {
 public:
  UpstreamClient();
  ~UpstreamClient();  // cancels every exchange still running and joins the loop
  UpstreamClient(const UpstreamClient&) = delete;
  UpstreamClient& operator=(const UpstreamClient&) = delete;

  // Sends `request` (method, target, end-to-end headers, body) to 127.0.0.1:port. A pooled
  // connection the rank closed meanwhile is retried once on a fresh one, before any answer byte.
  std::shared_ptr<UpstreamCall> start(int port, const HttpRequest& request, UpstreamObserver observer);

  // Closes the pooled idle connections to `port` (a rank that died: its port is gone).
  void forget_port(int port);

  struct Reply {
    int status = 0;
    std::string body;
    std::string error;  // non-empty: no complete answer
  };
  // A whole answer, waiting at most `timeout` (for the front's own /metrics and /health).
  Reply fetch(int port, const HttpRequest& request, std::chrono::milliseconds timeout);

 private:
  std::shared_ptr<struct UpstreamLoop> loop_;  // upstream_client.cpp
};

// The request as it goes to a rank: the client's end-to-end headers, its body, a fresh Host and
// Content-Length, keep-alive.
std::string upstream_request_bytes(const HttpRequest& request, int port);

}  // namespace deepinfer::server

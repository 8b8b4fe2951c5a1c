#pragma once
// One HTTP request as the handlers see it, and the response they give: a whole body, or a
// producer the connection drives as the engine generates (ResponseProducer). Nothing here knows
// the network library (server/http_listener.h owns the sockets; server/http_parser.h the bytes).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepinfer::server {

// ASCII case-insensitive equality (header names, the Bearer scheme).
bool iequals(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // the request-target as sent
  std::string path;    // the target without its query
  int version = 11;    // 10 (HTTP/1.0) or 11
  std::vector<std::pair<std::string, std::string>> headers;  // in arrival order, names as sent
  std::string body;
  std::string remote_addr;
  int remote_port = 0;

  // The first value of header `name` (case-insensitive), or "".
  std::string get_header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

class ResponseProducer;

struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type / Content-Length
  std::string content_type;
  std::string body;
  // Set by a generating handler: the answer comes from the engine after the handler returned,
  // and the connection drives it (server/http_listener.cpp).
  std::shared_ptr<ResponseProducer> producer;

  void set_header(std::string name, std::string value);
  void set_content(std::string content, std::string type);
};

// An answer the engine is still generating. The connection that owns it calls set_wakeup once,
// then pump() whenever the wake-up fired (and after each write) until it returns true, or
// abandon() when the client left or the server stops. All calls come from one thread at a time.
class ResponseProducer {
 public:
  virtual ~ResponseProducer() = default;
  // Whether streaming() can be answered yet. A proxied answer (the data-parallel front) knows it
  // only once its engine rank's status line came back; until then the connection holds its own
  // status line and waits for a wake-up. Every other producer knows at once.
  virtual bool head_ready() const { return true; }
  // Server-sent events: the status line and headers go out at once (200, text/event-stream),
  // then pump()'s bytes as they come. Otherwise the whole response goes out when pump() is done.
  virtual bool streaming() const = 0;
  // `wakeup` may be called from any thread (the engine's) whenever pump() may have news.
  virtual void set_wakeup(std::function<void()> wakeup) = 0;
  // Never blocks. Streaming: appends the next SSE bytes to `out`. Returns true once the answer
  // is complete; a non-streaming producer has then filled `response` (status, body).
  virtual bool pump(std::string& out, HttpResponse& response) = 0;
  // The client is gone (or the server stops): cancel the request in the engine, count and log
  // it (499). No pump() follows.
  virtual void abandon() = 0;
};

// The status logged and counted for a request whose client left before its answer was complete
// (nginx's 499; no client ever sees it).
inline constexpr int kClientClosedRequest = 499;

// "OK", "Not Found", ...; "Unknown" for a status without a registered phrase.
const char* reason_phrase(int status);

}  // namespace deepinfer::server

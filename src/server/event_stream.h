#pragma once
// A server-sent-events response: the body runs on the HTTP worker after the headers went out and
// learns from every write whether the client is still there, so a client that disconnects
// mid-stream ends its request (the caller cancels it in the engine).
#include <functional>
#include <string>

#include <httplib.h>

namespace deepinfer::server {

class EventSink {
 public:
  explicit EventSink(httplib::DataSink& sink) : sink_(sink) {}
  // False once the client is gone; later writes are dropped.
  bool write(const std::string& frame);
  bool alive() const;

 private:
  httplib::DataSink& sink_;
  bool broken_ = false;
};

// `body` writes the frames; `on_end(client_stayed)` runs once afterwards, also when the client
// left before the body ran.
void send_event_stream(httplib::Response& response, std::function<void(EventSink&)> body,
                       std::function<void(bool client_stayed)> on_end);

}  // namespace deepinfer::server

#include "server/event_stream.h"

#include <memory>

namespace deepinfer::server {

bool EventSink::write(const std::string& frame) {
  if (broken_) return false;
  if (!sink_.is_writable() || !sink_.write(frame.data(), frame.size())) broken_ = true;
  return !broken_;
}

bool EventSink::alive() const { return !broken_ && sink_.is_writable(); }

void send_event_stream(httplib::Response& response, std::function<void(EventSink&)> body,
                       std::function<void(bool client_stayed)> on_end) {
  response.set_header("Cache-Control", "no-cache");
  response.set_header("X-Accel-Buffering", "no");
  auto stayed = std::make_shared<bool>(false);
  response.set_chunked_content_provider(
      "text/event-stream",
      [body = std::move(body), stayed](size_t, httplib::DataSink& sink) {
        EventSink events(sink);
        body(events);
        if (!events.alive()) return false;
        *stayed = true;
        sink.done();
        return true;
      },
      [on_end = std::move(on_end), stayed](bool) { on_end(*stayed); });
}

}  // namespace deepinfer::server

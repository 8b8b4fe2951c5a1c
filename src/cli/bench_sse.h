#pragma once
// Server-sent events as the OpenAI streaming APIs send them. Bytes arrive from the socket in pieces
// cut anywhere (inside a line, between CR and LF), so the reader keeps the unfinished line and event
// between calls and hands back only whole events. Parsing follows the HTML "event stream" rules
// (lines end in LF, CRLF or CR; ':' starts a comment; a blank line ends an event); `id` and
// `retry` are ignored, a client measuring one response has no use for them.
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::cli::bench {

struct SseEvent {
  std::string event;  // the `event:` field; empty means "message"
  std::string data;   // the `data:` lines joined with '\n'
};

class SseReader {
 public:
  // The events that these bytes complete, in order.
  std::vector<SseEvent> feed(std::string_view bytes);

 private:
  void take_line(std::string_view line, std::vector<SseEvent>& out);

  std::string line_;
  bool after_cr_ = false;  // the last byte was CR, so an LF that follows ends nothing new
  std::string event_;
  std::string data_;
  bool has_data_ = false;
};

// The sentinel OpenAI-compatible servers send as the last event's data.
inline bool is_done_marker(std::string_view data) { return data == "[DONE]"; }

}  // namespace deepinfer::cli::bench

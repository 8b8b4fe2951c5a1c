#include "cli/bench_sse.h"

namespace deepinfer::cli::bench {

std::vector<SseEvent> SseReader::feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      take_line(line_, out);
      line_.clear();
    } else {
      line_.push_back(c);
    }
  }
  return out;
}

void SseReader::take_line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    if (has_data_) out.push_back(SseEvent{std::move(event_), std::move(data_)});
    event_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;
  std::string_view field = line;
  std::string_view value;
  if (auto colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  }
}

}  // namespace deepinfer::cli::bench

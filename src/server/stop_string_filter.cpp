#include "server/stop_string_filter.h"

#include <algorithm>
#include <utility>

namespace deepinfer::server {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) {
  for (std::string& stop : stops)
    if (!stop.empty()) stops_.push_back(std::move(stop));
}

std::string StopStringFilter::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  std::size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of some stop string.
  std::size_t keep = 0;
  for (const std::string& stop : stops_)
    for (std::size_t length = std::min(stop.size() - 1, held_.size()); length > keep; --length)
      if (held_.compare(held_.size() - length, length, stop, 0, length) == 0) {
        keep = length;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringFilter::finish() {
  if (stopped_) return {};
  return std::exchange(held_, {});
}

}  // namespace deepinfer::server

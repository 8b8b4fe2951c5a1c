#pragma once
// Stop strings over raw generated text, for the Completions endpoint (which shows the model's text
// as is, without the chat output parser): text that could still begin a stop string is held back,
// and once one matches, it and everything after it are dropped.
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::server {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);
  // The text that is final after `text` arrived.
  std::string push(std::string_view text);
  // The generation ended: what was held back is final.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace deepinfer::server

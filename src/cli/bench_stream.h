#pragma once
// Measures one streamed completion from its raw bytes: when each token-carrying chunk arrived, the
// usage block (prompt, output and prefix-cache-hit token counts), the reply text, and whether the
// stream ended properly with [DONE] or carried an error.
#include <string>
#include <string_view>

#include "cli/bench_prompts.h"
#include "cli/bench_sse.h"
#include "cli/bench_stats.h"

namespace deepinfer::cli::bench {

class StreamMeter {
 public:
  explicit StreamMeter(Endpoint endpoint) : endpoint_(endpoint) {}

  // Bytes of the response body, received `elapsed_s` after the request was sent. Returns false
  // once the stream has failed (an error event, a malformed chunk): reading further is pointless.
  bool receive(std::string_view bytes, double elapsed_s);

  // The request's result; `latency_s` is when the response ended.
  RequestResult finish(double latency_s);

 private:
  void on_event(const SseEvent& event, double elapsed_s);

  Endpoint endpoint_;
  SseReader reader_;
  RequestResult result_;
  bool done_ = false;
  double last_token_s_ = 0;
};

}  // namespace deepinfer::cli::bench

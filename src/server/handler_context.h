#pragma once
// What every endpoint handler shares: the model, the metrics, and the per-request log line.
#include <functional>
#include <string>

#include "server/metrics.h"
#include "server/served_model.h"

namespace deepinfer::server {

struct HandlerContext {
  ServedModel& model;
  Metrics& metrics;
  std::function<void(const std::string&)> log;

  // Counts a finished request and writes its log line:
  // "request id=... endpoint=... status=... prompt_tokens=... cached_tokens=... completion_tokens=...
  //  ttft_ms=... latency_ms=..." (+ " client_disconnected=1" when the client left early).
  void report(const std::string& id, const RequestRecord& record, int64_t cached_tokens,
              bool client_disconnected = false) const;
};

}  // namespace deepinfer::server

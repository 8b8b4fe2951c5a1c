#include "server/handler_context.h"

#include <cstdio>

namespace deepinfer::server {

void HandlerContext::report(const std::string& id, const RequestRecord& record, int64_t cached_tokens,
                            bool client_disconnected) const {
  metrics.record(record);
  char timing[96];
  std::snprintf(timing, sizeof timing, " ttft_ms=%.1f latency_ms=%.1f",
                record.time_to_first_token >= 0 ? record.time_to_first_token * 1e3 : 0.0, record.latency * 1e3);
  std::string line = "request id=" + (id.empty() ? std::string("-") : id) + " endpoint=" + record.endpoint +
                     " status=" + std::to_string(record.status) +
                     " prompt_tokens=" + std::to_string(record.prompt_tokens) +
                     " cached_tokens=" + std::to_string(cached_tokens) +
                     " completion_tokens=" + std::to_string(record.completion_tokens) + timing;
  if (client_disconnected) line += " client_disconnected=1";
  if (log) log(line);
}

}  // namespace deepinfer::server

#pragma once
// Prometheus counters and histograms of the server (GET /metrics), plus the engine's own
// counters read at scrape time. Names follow vLLM's where one exists (vllm:... -> deepinfer:...).
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/backend.h"
#include "server/http_listener.h"

namespace deepinfer::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // "<name>_bucket{le=...} n" lines, then _sum and _count.
  void render(const std::string& name, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

// What one finished request adds.
struct RequestRecord {
  std::string endpoint;  // "/v1/chat/completions", ...
  int status = 200;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double time_to_first_token = -1;  // seconds; < 0: no token was produced
  double time_per_output_token = -1;
  double latency = 0;
};

class Metrics {
 public:
  Metrics();
  void record(const RequestRecord& record);
  // Every metric in the Prometheus text format 0.0.4; `engine` gives the gauges and engine
  // counters, `connections` the HTTP connection gauges and counters.
  std::string render(const engine::EngineStats& engine, const std::string& model_name,
                     const ListenerStats& connections = {},
                     const std::optional<model::DeviceTime>& device = std::nullopt) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;  // (endpoint, status) -> count
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  Histogram time_to_first_token_;
  Histogram time_per_output_token_;
  Histogram latency_;
};

}  // namespace deepinfer::server

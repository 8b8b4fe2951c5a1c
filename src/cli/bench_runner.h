#pragma once
// Drives a benchmark against an OpenAI-compatible server: sends each conversation at its arrival
// time (Poisson at --request-rate), at most --max-concurrency at once, one thread and one
// keep-alive connection per conversation in flight, and streams every response through a
// StreamMeter. Turns of a conversation follow one another with no pause.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_prompts.h"
#include "cli/bench_stats.h"

namespace deepinfer::cli::bench {

struct ServerTarget {
  std::string base_url;  // http(s)://host:port, optionally followed by a path prefix
  std::string api_key;   // sent as a bearer token when not empty
  double timeout_s = 600;
};

struct BaseUrl {
  std::string origin;  // scheme://host[:port]
  std::string prefix;  // "" or a path without a trailing '/', put before /v1/...
};
// Throws deepinfer::Error unless the URL starts with http:// or https:// and names a host.
BaseUrl split_base_url(std::string_view url);

// The first model GET /v1/models lists. Throws deepinfer::Error when the server cannot be asked or
// lists none.
std::string first_served_model(const ServerTarget& target);

struct RunOptions {
  ServerTarget target;
  Endpoint endpoint = Endpoint::Completions;
  std::string model;
  double request_rate = std::numeric_limits<double>::infinity();
  std::size_t max_concurrency = 0;  // 0: no limit
  uint64_t seed = 0;
  bool ignore_eos = true;
  nlohmann::json response_format;  // null: none (--response-format)
};

struct RunOutcome {
  std::vector<RequestResult> results;  // conversation by conversation, turns in order
  double duration_s = 0;               // first request sent -> last response finished
};

RunOutcome run_benchmark(std::vector<Conversation> conversations, const RunOptions& options);

}  // namespace deepinfer::cli::bench

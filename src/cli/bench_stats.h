#pragma once
// What one benchmark request measured, and the figures a run reports over all of them. The
// definitions follow vLLM's `vllm bench serve` so numbers from the two tools compare:
// - TTFT: request sent -> first chunk carrying a token (content, reasoning or a tool call);
// - ITL: the gap between one token-carrying chunk and the next, every gap of every request;
// - TPOT: (latency - TTFT) / (output tokens - 1), per request with at least two output tokens;
// - E2E latency: request sent -> stream finished.
// Percentiles interpolate linearly between the closest ranks (numpy's default), as vLLM's do.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace deepinfer::cli::bench {

struct RequestResult {
  bool ok = false;
  std::string error;  // why it failed: HTTP status and body, connection error, malformed stream
  double start_s = 0;    // when it was sent, from the start of the run
  double ttft_s = 0;
  double latency_s = 0;
  std::vector<double> itl_s;
  int64_t token_chunks = 0;   // chunks that carried a token
  bool usage_reported = false;  // the stream's usage block came; the token counts below are from it
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // usage.prompt_cache_hit_tokens (or prompt_tokens_details.cached_tokens)
  std::string reply;  // the generated content, for the next turn of a conversation
};

// Time per output token after the first; none when fewer than two tokens came.
std::optional<double> tpot_seconds(const RequestResult& result);

// p-th percentile (0..100) of `values`, linear between closest ranks; none for no values.
std::optional<double> percentile(std::vector<double> values, double p);

struct Distribution {
  std::size_t count = 0;
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};
Distribution describe(std::span<const double> values);

struct RunSummary {
  int64_t completed = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> errors;  // failure message -> requests that failed with it
  double duration_s = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  int64_t without_usage = 0;  // successful requests whose stream had no usage block (counts are 0)
  double request_throughput = 0;       // completed requests / duration
  double output_throughput = 0;        // output tokens / duration
  double total_token_throughput = 0;   // (prompt + output tokens) / duration
  std::optional<double> prefix_cache_hit_rate;  // cached prompt tokens / prompt tokens
  Distribution ttft_ms, tpot_ms, itl_ms, e2el_ms;
};

// Token counts and latencies come from successful requests only; failures are counted by message.
RunSummary summarize(std::span<const RequestResult> results, double duration_s);

}  // namespace deepinfer::cli::bench

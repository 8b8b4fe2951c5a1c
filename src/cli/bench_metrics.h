#pragma once
// What `deepinfer bench` reads from the server's /metrics around a run: the speculative-decoding
// counters (deepinfer:spec_decode_*, as vLLM's benchmark reads vllm:spec_decode_*) and the engine's
// step count, so a run reports its acceptance length and per-position acceptance.
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "cli/bench_runner.h"

namespace deepinfer::cli::bench {

struct SpeculationScrape {
  int64_t steps = 0;
  int64_t drafts = 0;           // verifications with drafts
  int64_t draft_tokens = 0;     // verified
  int64_t accepted_tokens = 0;
  int64_t proposed_tokens = 0;
  std::vector<int64_t> verified_by_position;
  std::vector<int64_t> accepted_by_position;
};

// The counters in a Prometheus text exposition; nullopt when it has no spec_decode counters (a
// server without speculative decoding).
std::optional<SpeculationScrape> parse_speculation_metrics(std::string_view exposition);
// GET /metrics and parse it; nullopt when the server does not answer it or has no such counters.
std::optional<SpeculationScrape> scrape_speculation(const ServerTarget& target);
// after - before, counter by counter.
SpeculationScrape speculation_delta(const SpeculationScrape& before, const SpeculationScrape& after);

}  // namespace deepinfer::cli::bench

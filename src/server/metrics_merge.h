#pragma once
// The data-parallel front's GET /metrics: every engine rank's Prometheus text as one exposition,
// each sample labelled with its rank (engine="i", as vLLM labels its data-parallel engines) and
// each metric family kept together under one HELP and TYPE, as the text format requires.
#include <string>
#include <vector>

namespace deepinfer::server {

struct RankMetrics {
  int rank = 0;
  std::string text;  // the rank's /metrics body (text format 0.0.4)
};

// Families in the order they first appear; within a family, ranks in the order given. A sample
// line that already has labels gets engine="i" appended to them; one without gets {engine="i"}.
// Lines that are neither comments nor samples are dropped.
std::string merge_rank_metrics(const std::vector<RankMetrics>& ranks);

}  // namespace deepinfer::server

#pragma once
// When each benchmark request (or conversation) is sent, as in `vllm bench serve --request-rate`:
// a Poisson process, i.e. exponentially distributed gaps with mean 1/rate, the first at time 0.
#include <cstdint>
#include <vector>

namespace deepinfer::cli::bench {

// Offsets in seconds from the start of the run, non-decreasing. An infinite rate sends all at 0.
// Throws deepinfer::Error for a rate that is not positive.
std::vector<double> poisson_arrival_offsets(std::size_t count, double rate_per_s, uint64_t seed);

}  // namespace deepinfer::cli::bench

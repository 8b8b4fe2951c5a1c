#include "cli/bench_arrivals.h"

#include <cmath>

#include "cli/bench_random.h"
#include "core/error.h"

namespace deepinfer::cli::bench {

std::vector<double> poisson_arrival_offsets(std::size_t count, double rate_per_s, uint64_t seed) {
  if (!(rate_per_s > 0)) fail("request rate must be positive, got ", rate_per_s);
  std::vector<double> offsets(count, 0.0);
  if (std::isinf(rate_per_s)) return offsets;
  Rng rng(seed);
  for (std::size_t i = 1; i < count; ++i) {
    // Inverse CDF of the exponential; 1 - u lies in (0, 1], so the log is finite.
    const double gap = -std::log(1.0 - uniform_unit(rng)) / rate_per_s;
    offsets[i] = offsets[i - 1] + gap;
  }
  return offsets;
}

}  // namespace deepinfer::cli::bench

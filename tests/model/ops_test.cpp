#include "model/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace deepinfer::model {
namespace {

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// dots() is dot() for many rows at once, and must give its bits: the attention logits of a
// token do not depend on how many keys were scored together.
TEST(Ops, DotsGiveDotsBits) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t n : {1, 31, 32, 128, 130, 512}) {
    for (int64_t count : {0, 1, 2, 3, 7}) {
      std::vector<float> a(static_cast<std::size_t>(n));
      for (float& v : a) v = normal(rng);
      std::vector<std::vector<float>> rows(static_cast<std::size_t>(count), std::vector<float>(static_cast<std::size_t>(n)));
      std::vector<const float*> pointers;
      for (auto& row : rows) {
        for (float& v : row) v = normal(rng);
        pointers.push_back(row.data());
      }
      if (count > 1) rows[1][0] = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> out(static_cast<std::size_t>(count), -1.0f);
      dots(a.data(), pointers.data(), count, n, out.data());
      for (int64_t j = 0; j < count; ++j) {
        const float expected = dot(a.data(), pointers[static_cast<std::size_t>(j)], n);
        EXPECT_TRUE(same_bits(out[static_cast<std::size_t>(j)], expected) ||
                    (std::isnan(out[static_cast<std::size_t>(j)]) && std::isnan(expected)))
            << "n " << n << " row " << j << " of " << count << ": " << out[static_cast<std::size_t>(j)] << " vs " << expected;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::model

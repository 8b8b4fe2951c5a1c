// The V4 forward pass against the transformers reference's causal outputs, one fixture at a time.
#include <gtest/gtest.h>

#include <cmath>

#include "golden.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

using testing::Golden;

TEST(ModelForwardTest, TinyBf16LayerStreams) {
  const Model model = Model::load(testing::fixture_dir("tiny_bf16"));
  const Golden golden("tiny_bf16");
  const auto ids = golden.ids("input_ids");
  const int64_t tokens = static_cast<int64_t>(ids.size());
  SequenceState sequence = model.new_sequence();
  std::vector<float> logits(static_cast<std::size_t>(tokens * model.vocab_size()));
  ForwardTrace trace;
  model.forward(sequence, ids, logits, LogitRows::All, &trace);
  const auto streams = golden.floats("causal_layer_streams");
  const int64_t layers = model.config().num_layers;
  const int64_t width = model.config().hc_mult * model.config().hidden_size;
  for (int64_t layer = 0; layer < layers; ++layer) {
    float worst = 0;
    int64_t worst_t = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      const float diff = testing::max_abs_diff(trace.layer_streams.data() + (t * layers + layer) * width,
                                               streams.data() + (t * layers + layer) * width, width);
      if (diff > worst) { worst = diff; worst_t = t; }
    }
    std::printf("layer %ld: max diff %g at t=%ld\n", layer, worst, worst_t);
  }
  const auto want = golden.floats("causal_logits");
  std::printf("logits max diff %g\n", testing::max_abs_diff(logits.data(), want.data(), want.size()));
}

}  // namespace
}  // namespace deepinfer::model

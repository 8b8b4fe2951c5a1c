#include "model/compressor.h"

#include <cmath>

#include "core/error.h"
#include "model/ops.h"

namespace deepinfer::model {

CompressorWeights load_compressor(const Weights& weights, const std::string& prefix, int64_t ratio, int64_t head_dim,
                                  bool overlap, float eps) {
  CompressorWeights out{weights.matrix(prefix + "wkv.weight"),
                        weights.matrix(prefix + "wgate.weight"),
                        weights.floats(prefix + "ape"),
                        weights.floats(prefix + "norm.weight"),
                        ratio,
                        head_dim,
                        overlap,
                        eps};
  const int64_t width = out.width();
  if (out.wkv.rows != width || out.wgate.rows != width || static_cast<int64_t>(out.ape.size()) != ratio * width ||
      static_cast<int64_t>(out.norm.size()) != head_dim)
    fail(weights.path(), ": compressor ", prefix, " does not have ", width, " channels over ", ratio, " slots");
  return out;
}

namespace {

// Pools one closed window (rows [ratio, width] of kv and gate) into entry `index`.
void close_window(const CompressorWeights& weights, const RopeTable& rope, CompressorState& state, int64_t index) {
  const int64_t ratio = weights.ratio;
  const int64_t d = weights.head_dim;
  const int64_t width = weights.width();
  const bool has_previous = weights.overlap && !state.previous_kv.empty();
  std::vector<float> entry(static_cast<std::size_t>(d));
  std::vector<float> logits;
  std::vector<float> values;
  for (int64_t e = 0; e < d; ++e) {
    logits.clear();
    values.clear();
    // Slot order as the reference lays them out: the previous window's A half, then this
    // window's B half (overlap); or this window alone.
    if (has_previous)
      for (int64_t j = 0; j < ratio; ++j) {
        logits.push_back(state.previous_gate[j * width + e]);
        values.push_back(state.previous_kv[j * width + e]);
      }
    const int64_t channel = weights.overlap ? d + e : e;
    for (int64_t j = 0; j < ratio; ++j) {
      logits.push_back(state.open_gate[j * width + channel]);
      values.push_back(state.open_kv[j * width + channel]);
    }
    softmax(logits.data(), static_cast<int64_t>(logits.size()));
    float sum = 0.0f;
    for (std::size_t j = 0; j < values.size(); ++j) sum += values[j] * logits[j];
    entry[e] = sum;
  }
  rms_norm(entry.data(), d, weights.norm.data(), weights.eps, entry.data());
  rope.apply(entry.data(), d, index * ratio);
  state.entries.write(index, entry.data());
  if (weights.overlap) {
    state.previous_kv = state.open_kv;
    state.previous_gate = state.open_gate;
  }
  state.open_kv.clear();
  state.open_gate.clear();
}

}  // namespace

void compress(const CompressorWeights& weights, const RopeTable& rope, CompressorState& state, const float* x,
              int64_t tokens, int64_t first_position) {
  const int64_t width = weights.width();
  const int64_t open_rows = static_cast<int64_t>(state.open_kv.size()) / width;
  const int64_t fed = state.entries.size() * weights.ratio + open_rows;
  if (first_position != fed) fail("compressor fed position ", first_position, " after ", fed, " tokens");
  std::vector<float> kv(static_cast<std::size_t>(tokens * width));
  std::vector<float> gate(static_cast<std::size_t>(tokens * width));
  kernels::linear(x, tokens, weights.wkv, kv.data());
  kernels::linear(x, tokens, weights.wgate, gate.data());
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t offset = (first_position + t) % weights.ratio;
    for (int64_t c = 0; c < width; ++c) gate[t * width + c] += weights.ape[offset * width + c];
    state.open_kv.insert(state.open_kv.end(), kv.begin() + t * width, kv.begin() + (t + 1) * width);
    state.open_gate.insert(state.open_gate.end(), gate.begin() + t * width, gate.begin() + (t + 1) * width);
    if (offset == weights.ratio - 1) close_window(weights, rope, state, state.entries.size());
  }
}

}  // namespace deepinfer::model

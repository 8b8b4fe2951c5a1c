// The CPU backend: the reference implementation of every coarse operation (model/backend.h),
// on host vectors, with the CPU kernels (kernels/cpu) and the loops of attention.cpp, moe.cpp,
// hyper_connections.cpp and engram.cpp. Every row is reduced in an order fixed by the row.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/float_formats.h"
#include "model/backend.h"
#include "model/engram.h"
#include "model/ops.h"
#include "model/parallel.h"

namespace deepinfer::model {

void ForwardPass::collapse_head(const HeadWeights&, std::span<const int64_t>, float*) {
  fail("this backend does not run DSpark drafts (the head's collapsed rows)");
}

void ForwardPass::draft_attention(const AttentionWeights&, std::span<const AttentionSegment>) {
  fail("this backend does not run DSpark drafts (draft-block attention)");
}

void ForwardPass::head_draw(const HeadWeights&, std::span<const int64_t>, std::span<const TokenDraw>,
                            std::span<DrawnToken>, const std::function<void()>*, std::unique_ptr<PendingDraws>*) {
  fail("this backend does not draw tokens itself: ask for logits");
}

namespace {

void rms_norm_rows(float* x, int64_t rows, int64_t width, const float* weight, float eps) {
  parallel_items(rows, 2 * width, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) rms_norm(x + t * width, width, weight, eps, x + t * width);
  });
}

class CpuForwardPass final : public ForwardPass {
 public:
  CpuForwardPass(const PassShape& shape, int64_t rows)
      : warm_(default_thread_pool()),
        shape_(shape),
        rows_(rows),
        streams_(static_cast<std::size_t>(rows * shape.hc.streams * shape.hc.hidden)),
        sublayer_in_(static_cast<std::size_t>(rows * shape.hc.hidden)),
        sublayer_out_(static_cast<std::size_t>(rows * shape.hc.hidden)) {
    if (shape.single_pass) carried_pre_ = one_hot_pre(shape.hc, rows);
  }

  void embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens, std::span<const int32_t> from_draw,
             const PendingDraws* /*draw_source*/) override {
    if (std::any_of(from_draw.begin(), from_draw.end(), [](int32_t draw) { return draw >= 0; }))
      fail("the CPU backend draws no tokens: a row cannot take its token from a draw");
    const int64_t n = shape_.hc.streams;
    const int64_t d = shape_.hc.hidden;
    for (int64_t t = 0; t < rows_; ++t) {
      float* token_streams = streams_.data() + t * n * d;
      kernels::decode_row(table, tokens[t], token_streams);
      for (int64_t i = 1; i < n; ++i) std::copy_n(token_streams, d, token_streams + i * d);
    }
  }

  void restart_window(AttentionState& state, int64_t first_position) override {
    state.window.erase_front(state.window.size());
    state.window_first = first_position;
  }

  void engram(const Engram& engram, int index, std::span<const int64_t> hash_ids) override {
    engram.apply(index, hash_ids, streams_, rows_);
  }

  void enter_site(const HyperConnectionWeights& hc, std::span<const float> norm) override {
    if (shape_.single_pass) {
      mix_ = hyper_mix(hc, shape_.hc, streams_.data(), rows_);
      hyper_collapse(carried_pre_.data(), shape_.hc, streams_.data(), rows_, sublayer_in_.data());
      carried_pre_ = mix_.pre;
    } else {
      mix_ = hyper_pre(hc, shape_.hc, streams_.data(), rows_, sublayer_in_.data());
    }
    rms_norm_rows(sublayer_in_.data(), rows_, shape_.hc.hidden, norm.data(), shape_.norm_eps);
  }

  void attention(const AttentionWeights& weights, std::span<const AttentionSegment> segments) override {
    attention_forward(weights, segments, sublayer_in_.data(), rows_, sublayer_out_.data());
  }

  void moe(const MoeWeights& weights, std::span<const int32_t> token_ids, std::vector<Routing>* routing) override {
    moe_forward(weights, sublayer_in_.data(), token_ids.data(), rows_, sublayer_out_.data(), routing);
  }

  void exit_site() override { hyper_post(mix_, shape_.hc, sublayer_out_.data(), rows_, streams_.data()); }

  void drop_front_rows(int64_t rows) override {
    const int64_t n = shape_.hc.streams;
    streams_.erase(streams_.begin(), streams_.begin() + rows * n * shape_.hc.hidden);
    if (shape_.single_pass) carried_pre_.erase(carried_pre_.begin(), carried_pre_.begin() + rows * n);
    rows_ -= rows;
  }

  void read_streams(std::span<float> out) override {
    std::copy_n(streams_.data(), rows_ * shape_.hc.streams * shape_.hc.hidden, out.data());
  }

  void tap_streams(int64_t tap, int64_t taps, std::span<float> out) override {
    const int64_t n = shape_.hc.streams, d = shape_.hc.hidden;
    if (tap < 0 || tap >= taps || std::cmp_not_equal(out.size(), rows_ * taps * d))
      fail("forward: tap ", tap, " of ", taps, " into ", out.size(), " floats for ", rows_, " rows of ", d);
    for (int64_t t = 0; t < rows_; ++t) {
      const float* streams = streams_.data() + t * n * d;
      float* mean = out.data() + (t * taps + tap) * d;
      for (int64_t e = 0; e < d; ++e) {
        float sum = 0.0f;
        for (int64_t k = 0; k < n; ++k) sum += streams[k * d + e];
        mean[e] = sum / static_cast<float>(n);
      }
    }
  }

  void draft_attention(const AttentionWeights& weights, std::span<const AttentionSegment> segments) override {
    draft_block_attention(weights, segments, sublayer_in_.data(), rows_, sublayer_out_.data());
  }

  void collapse_head(const HeadWeights& weights, std::span<const int64_t> rows, float* collapsed) override {
    const int64_t n = shape_.hc.streams;
    const int64_t d = shape_.hc.hidden;
    const auto count = static_cast<int64_t>(rows.size());
    std::vector<float> head_streams(static_cast<std::size_t>(count * n * d));
    std::vector<float> head_pre(shape_.single_pass ? static_cast<std::size_t>(count * n) : 0);
    for (int64_t r = 0; r < count; ++r) {
      std::copy_n(streams_.data() + rows[r] * n * d, n * d, head_streams.data() + r * n * d);
      if (shape_.single_pass) std::copy_n(carried_pre_.data() + rows[r] * n, n, head_pre.data() + r * n);
    }
    if (shape_.single_pass)
      hyper_collapse(head_pre.data(), shape_.hc, head_streams.data(), count, collapsed);
    else
      hyper_head(*weights.hc_head, shape_.hc, head_streams.data(), count, collapsed);
  }

  void head(const HeadWeights& weights, std::span<const int64_t> rows, float* logits,
            std::vector<float>* hidden_out) override {
    const int64_t d = shape_.hc.hidden;
    const auto count = static_cast<int64_t>(rows.size());
    std::vector<float> hidden(static_cast<std::size_t>(count * d));
    collapse_head(weights, rows, hidden.data());
    rms_norm_rows(hidden.data(), count, d, weights.norm.data(), shape_.norm_eps);
    if (hidden_out) *hidden_out = hidden;
    kernels::linear(hidden.data(), count, *weights.head, logits);
  }

 private:
  ThreadPool::Warm warm_;  // the pool's workers stay awake between this pass's parallel regions
  PassShape shape_;
  int64_t rows_;
  std::vector<float> streams_;  // [rows, hc, D]
  std::vector<float> sublayer_in_, sublayer_out_;
  std::vector<float> carried_pre_;  // single pass: [rows, hc]
  HyperMix mix_;
};

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::unique_ptr<ForwardPass> begin(const PassShape& shape, const CallShape& call) const override {
    return std::make_unique<CpuForwardPass>(shape, call.rows);
  }
};

}  // namespace

std::shared_ptr<const Backend> cpu_backend() {
  static const std::shared_ptr<const Backend> backend = std::make_shared<CpuBackend>();
  return backend;
}

}  // namespace deepinfer::model

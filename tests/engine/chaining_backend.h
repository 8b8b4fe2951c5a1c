#pragma once
// The CPU backend made to draw tokens and chain passes the way the CUDA backend does
// (model::Backend::chains_draws), so that CI drives the engine's overlap scheduling without a
// GPU: a pass draws its tokens with the engine's own sampler on the head's logits; asked to leave
// its draws pending, it hands them out through a PendingDraws that also stands for their copy on
// the device, which a pass chained on it reads for its rows that name a draw (embed's from_draw).
// Draws with penalties are refused: these tests send none. A grammar mask is applied as the
// engine's host path applies it.
#include <algorithm>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/token_history.h"
#include "forwarding_pass.h"
#include "model/backend.h"

namespace deepinfer::engine::testing {

class ChainingCpuBackend final : public model::Backend {
 public:
  std::string name() const override { return "cpu, drawing and chaining"; }
  std::unique_ptr<model::ForwardPass> begin(const model::PassShape& shape, const model::CallShape& call) const override;
  bool draws_tokens() const override { return true; }
  bool chains_draws() const override { return true; }
  int64_t chained_rows() const { return chained_rows_; }
  int64_t mixed_passes() const { return mixed_passes_; }
  int64_t draws() const { return draws_; }

 private:
  friend class ChainingPass;
  mutable int64_t chained_rows_ = 0;  // rows whose token came from a draw
  mutable int64_t mixed_passes_ = 0;  // passes with rows from draws and prompt rows beside them
  mutable int64_t draws_ = 0;         // tokens drawn
};

class ChainedDraws final : public model::PendingDraws {
 public:
  explicit ChainedDraws(std::vector<model::DrawnToken> drawn) : drawn_(std::move(drawn)) {}
  void wait(std::span<model::DrawnToken> drawn) override {
    if (drawn.size() != drawn_.size()) fail("chaining backend: ", drawn_.size(), " draws read into ", drawn.size());
    std::copy(drawn_.begin(), drawn_.end(), drawn.begin());
  }
  int32_t token(int32_t draw) const {
    if (draw < 0 || static_cast<std::size_t>(draw) >= drawn_.size())
      fail("chaining backend: a row reads draw ", draw, " of ", drawn_.size());
    return drawn_[static_cast<std::size_t>(draw)].token;
  }

 private:
  std::vector<model::DrawnToken> drawn_;
};

class ChainingPass final : public ForwardingPass {
 public:
  ChainingPass(std::unique_ptr<model::ForwardPass> inner, const ChainingCpuBackend& backend, bool decode)
      : ForwardingPass(std::move(inner)), backend_(backend), decode_(decode) {}

  // As the CUDA backend: a decode call replays a graph, which cannot bring streams back mid-pass.
  void read_streams(std::span<float> out) override {
    if (decode_) fail("chaining backend: a decode call reads its streams back (a trace)");
    inner().read_streams(out);
  }
  void tap_streams(int64_t tap, int64_t taps, std::span<float> out) override {
    if (decode_) fail("chaining backend: a decode call takes taps");
    inner().tap_streams(tap, taps, out);
  }

  void embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens, std::span<const int32_t> from_draw,
             const model::PendingDraws* draw_source) override {
    ids_.assign(tokens.begin(), tokens.end());
    const auto drawn_rows = std::count_if(from_draw.begin(), from_draw.end(), [](int32_t draw) { return draw >= 0; });
    if (drawn_rows > 0 && static_cast<std::size_t>(drawn_rows) < tokens.size()) ++backend_.mixed_passes_;
    for (std::size_t t = 0; t < from_draw.size(); ++t) {
      if (from_draw[t] < 0) continue;
      const auto* source = dynamic_cast<const ChainedDraws*>(draw_source);
      if (!source) fail("chaining backend: row ", t, " names a draw but the pass has no draw source");
      ids_[t] = source->token(from_draw[t]);
      ++backend_.chained_rows_;
    }
    inner().embed(table, ids_, {}, nullptr);
  }
  // Hash routing reads the rows' ids: the resolved ones, as the device's are.
  void moe(const model::MoeWeights& weights, std::span<const int32_t> token_ids,
           std::vector<model::Routing>* routing) override {
    inner().moe(weights, token_ids.size() == ids_.size() ? std::span<const int32_t>(ids_) : token_ids, routing);
  }
  void head_draw(const model::HeadWeights& weights, std::span<const int64_t> rows,
                 std::span<const model::TokenDraw> draws, std::span<model::DrawnToken> drawn,
                 const std::function<void()>* before_read, std::unique_ptr<model::PendingDraws>* pending) override {
    const auto vocab = static_cast<std::size_t>(weights.head->rows);
    std::vector<float> logits(rows.size() * vocab);
    inner().head(weights, rows, logits.data(), nullptr);
    if (before_read) (*before_read)();
    backend_.draws_ += static_cast<int64_t>(draws.size());
    std::vector<model::DrawnToken> out(draws.size());
    for (std::size_t i = 0; i < draws.size(); ++i) {
      const model::TokenDraw& draw = draws[i];
      if (draw.presence_penalty != 0 || draw.frequency_penalty != 0 || draw.repetition_penalty != 1)
        fail("chaining backend: draws with penalties are not supported");
      SamplingParams params;
      params.temperature = draw.temperature;
      params.top_p = draw.top_p;
      params.min_p = draw.min_p;
      params.top_k = draw.top_k;
      params.logit_bias.insert(draw.logit_bias.begin(), draw.logit_bias.end());
      if (draw.logprobs >= 0) params.logprobs = draw.logprobs;
      std::span<float> row(logits.data() + static_cast<std::size_t>(draw.row) * vocab, vocab);
      std::vector<float> masked;
      if (!draw.mask.empty()) {  // as the engine's host path: -inf outside the mask, its fallback when nothing is left
        masked.assign(row.begin(), row.end());
        bool any = false;
        for (std::size_t t = 0; t < vocab; ++t) {
          const bool allowed = t / 64 < draw.mask.size() && ((draw.mask[t / 64] >> (t % 64)) & 1) != 0;
          if (!allowed) masked[t] = -std::numeric_limits<float>::infinity();
          any = any || (allowed && masked[t] == masked[t]);
        }
        if (!any) {
          out[i].token = draw.mask_fallback_token;
          continue;
        }
        row = masked;
      }
      const SampleResult result = sample(row, params, TokenHistory{}, draw.seed, draw.request_id, draw.position);
      out[i].token = result.token;
      out[i].logprob = result.logprob;
      for (const TokenLogprob& top : result.top_logprobs) out[i].top_logprobs.emplace_back(top.token, top.logprob);
    }
    if (pending) {
      *pending = std::make_unique<ChainedDraws>(std::move(out));
      return;
    }
    std::copy(out.begin(), out.end(), drawn.begin());
  }

 private:
  const ChainingCpuBackend& backend_;
  bool decode_;
  std::vector<int32_t> ids_;
};

inline std::unique_ptr<model::ForwardPass> ChainingCpuBackend::begin(const model::PassShape& shape,
                                                                     const model::CallShape& call) const {
  return std::make_unique<ChainingPass>(model::cpu_backend()->begin(shape, call), *this, call.decode);
}

}  // namespace deepinfer::engine::testing

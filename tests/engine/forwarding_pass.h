#pragma once
// A forward pass that hands every operation to another one: the engine tests derive from it to
// change one or two operations of a real backend's pass (fail one, hand draws over) and keep the
// rest.
#include <memory>
#include <span>
#include <vector>

#include "model/backend.h"

namespace deepinfer::engine::testing {

class ForwardingPass : public model::ForwardPass {
 public:
  explicit ForwardingPass(std::unique_ptr<model::ForwardPass> inner) : inner_(std::move(inner)) {}

  void embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens, std::span<const int32_t> from_draw,
             const model::PendingDraws* draw_source) override {
    inner_->embed(table, tokens, from_draw, draw_source);
  }
  void engram(const model::Engram& engram, int index, std::span<const int64_t> hash_ids) override {
    inner_->engram(engram, index, hash_ids);
  }
  void enter_site(const model::HyperConnectionWeights& hc, std::span<const float> norm) override {
    inner_->enter_site(hc, norm);
  }
  void attention(const model::AttentionWeights& weights, std::span<const model::AttentionSegment> segments) override {
    inner_->attention(weights, segments);
  }
  void moe(const model::MoeWeights& weights, std::span<const int32_t> token_ids,
           std::vector<model::Routing>* routing) override {
    inner_->moe(weights, token_ids, routing);
  }
  void exit_site() override { inner_->exit_site(); }
  void drop_front_rows(int64_t rows) override { inner_->drop_front_rows(rows); }
  void restart_window(model::AttentionState& state, int64_t first_position) override {
    inner_->restart_window(state, first_position);
  }
  void read_streams(std::span<float> out) override { inner_->read_streams(out); }
  void tap_streams(int64_t tap, int64_t taps, std::span<float> out) override { inner_->tap_streams(tap, taps, out); }
  void finish_taps() override { inner_->finish_taps(); }
  void head(const model::HeadWeights& weights, std::span<const int64_t> rows, float* logits,
            std::vector<float>* hidden) override {
    inner_->head(weights, rows, logits, hidden);
  }
  void collapse_head(const model::HeadWeights& weights, std::span<const int64_t> rows, float* collapsed) override {
    inner_->collapse_head(weights, rows, collapsed);
  }
  void draft_attention(const model::AttentionWeights& weights,
                       std::span<const model::AttentionSegment> segments) override {
    inner_->draft_attention(weights, segments);
  }
  void greedy_draft_head(const model::DraftHeadWeights& weights, std::span<const int32_t> anchors, int64_t gamma,
                         std::span<int32_t> tokens, std::span<float> confidence_raw) override {
    inner_->greedy_draft_head(weights, anchors, gamma, tokens, confidence_raw);
  }
  void head_draw(const model::HeadWeights& weights, std::span<const int64_t> rows,
                 std::span<const model::TokenDraw> draws, std::span<model::DrawnToken> drawn,
                 const std::function<void()>* before_read, std::unique_ptr<model::PendingDraws>* pending) override {
    inner_->head_draw(weights, rows, draws, drawn, before_read, pending);
  }

 protected:
  model::ForwardPass& inner() { return *inner_; }

 private:
  std::unique_ptr<model::ForwardPass> inner_;
};

}  // namespace deepinfer::engine::testing

#pragma once
// The DSpark drafter of a V4 / V4.1 checkpoint (mtp.* with dspark_* config; docs/MODELS.md,
// "DSpark drafter"): from the target's tapped hidden states of committed positions it keeps a
// sliding-window context per stage, and for an anchor token it proposes a block of gamma tokens
// in one forward of its stages, with the Markov-corrected logits each was drawn from (the draft
// distribution verification needs) and a confidence per position.
//
// It runs on the backend's coarse operations (backend.h: embed, mHC sites, MoE, the draft-block
// attention, the head) over every request's block at once; greedy blocks' Markov loop too
// (greedy_draft_head), while picked or kept-logit blocks run it on the host. Its context store
// and the context's projections (inject) are on the host (on CUDA so is the draft-block
// attention's core, reading the drafter's host context, while its projections run on the device:
// a device core over a device context is still to come).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "io/model_config.h"
#include "kernels/kernels.h"
#include "model/attention.h"
#include "model/backend.h"
#include "model/hyper_connections.h"
#include "model/moe.h"
#include "model/weights.h"

namespace deepinfer::model {

struct DraftStageWeights {
  HyperConnectionWeights attn_hc, ffn_hc;
  std::vector<float> attn_norm, ffn_norm;
  AttentionWeights attention;
  MoeWeights moe;
};

struct DrafterWeights {
  std::vector<DraftStageWeights> stages;
  kernels::WeightMatrix main_proj;  // [D, taps * D]
  std::vector<float> main_norm;     // [D]
  std::vector<float> norm;          // [D] the last stage's, before the target's LM head
  HyperConnectionWeights hc_head;   // V4 only: the last stage's hyper-head
  kernels::WeightMatrix markov_w1;  // [V, r]: an embedding of the previous token
  kernels::WeightMatrix markov_w2;  // [V, r]: r -> V
  std::vector<float> confidence;    // [D + r]
  // The target's, shared.
  kernels::WeightMatrix embed, head;
};

// One sequence's drafter context: per stage, the window of K = V rows of committed positions
// [window_first, length).
struct DraftState {
  int64_t length = 0;  // committed positions injected = the next anchor's position
  std::vector<AttentionState> stages;
};

// One request's part of a draft call.
struct DraftRequest {
  DraftState* state = nullptr;
  int32_t anchor = -1;  // the last token the target produced, at position state->length
  // Picks draft token k (0-based) from the Markov-corrected logits z_k; empty: greedy (argmax,
  // ties to the lowest id). Verification must use the distribution this draw is made from.
  std::function<int32_t(std::span<const float> logits, int64_t k)> pick;
  // The block's logits (DraftBlock::logits, base_logits) come back; they always do with a pick.
  // A call whose requests need none drafts on the backend's greedy_draft_head, which returns
  // only the tokens and confidences.
  bool keep_logits = false;
};

struct DraftBlock {
  std::vector<int32_t> tokens;          // [gamma]
  std::vector<float> logits;            // [gamma, V] z_k = U_k + markov bias (kept logits only)
  std::vector<float> base_logits;       // [gamma, V] U_k (kept logits only)
  std::vector<float> confidence_raw;    // [gamma]
  std::vector<float> confidence;        // [gamma] sigmoid(raw / T_k): P(x_k survives | x_<k did)
};

class Drafter {
 public:
  // The drafter of `config`'s checkpoint; `embed` / `head` are the target's.
  static std::unique_ptr<Drafter> load(const Weights& weights, const ModelConfig& config,
                                       const kernels::WeightMatrix& embed, const kernels::WeightMatrix& head);

  int64_t block_size() const { return config_.block_size; }
  int64_t stages() const { return static_cast<int64_t>(weights_.stages.size()); }
  // Floats per position of the target's taps: one D-wide row per target layer id.
  int64_t tap_width() const { return static_cast<int64_t>(config_.target_layer_ids.size()) * hidden_; }
  const DsparkConfig& config() const { return config_; }

  // A context whose first committed position is `first_position`: the positions before it are
  // not known to the drafter (a sequence resumed from a prefix-cache snapshot, which holds the
  // target's state but not the drafter's). Until the window has filled again, its drafts see a
  // shorter context.
  DraftState new_state(int64_t first_position = 0) const;
  // Appends committed positions [state.length, state.length + rows) to the context from their
  // taps [rows, tap_width()].
  void inject(DraftState& state, std::span<const float> taps) const;
  // One draft block per request (a state appears at most once), on `backend`.
  std::vector<DraftBlock> draft(std::span<const DraftRequest> requests, const Backend& backend) const;

 private:
  Drafter(DrafterWeights weights, DsparkConfig config, PassShape shape, int64_t vocab, int64_t hidden,
          ModelFamily family)
      : weights_(std::move(weights)), config_(std::move(config)), shape_(shape), vocab_(vocab), hidden_(hidden),
        family_(family) {}

  DrafterWeights weights_;
  DsparkConfig config_;
  PassShape shape_;
  int64_t vocab_ = 0;
  int64_t hidden_ = 0;
  ModelFamily family_ = ModelFamily::V41;

  DraftHeadWeights head_weights() const;
};

// Where a target forward reads the drafter's taps: the streams after layer tap_after[j] (-1: the
// embedding), j in target-layer-id order. V4.1 taps the input of each target layer id, V4 its
// output (docs/MODELS.md).
std::vector<int64_t> dspark_tap_points(const ModelConfig& config);

}  // namespace deepinfer::model

#pragma once
// The DeepSeek-V4 / V4.1 forward pass over a backend's coarse operations (backend.h; the CPU's by
// default): embedding, hc_mult residual streams through
// every decoder layer (mHC-wrapped attention and MoE; V4.1: Engram before its layers, single-pass
// mHC, CSA2 shared compressed attention), the final collapse, norm and LM head. The family comes
// from the config (ModelConfig::family); one code path, the deltas switched by it.
// Sequences are incremental: forward() appends any number of tokens to a SequenceState (a whole
// prompt, a chunk of one, or one token when decoding) and the logits do not depend on the chunking.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "model/attention.h"
#include "model/backend.h"
#include "model/cache_layout.h"
#include "model/drafter.h"
#include "model/engram.h"
#include "model/hyper_connections.h"
#include "model/moe.h"
#include "model/sequence_state.h"
#include "model/weights.h"

namespace deepinfer::model {

struct LayerWeights {
  HyperConnectionWeights attn_hc, ffn_hc;
  std::vector<float> attn_norm, ffn_norm;
  AttentionWeights attention;
  MoeWeights moe;
};

// V4's multi-token-prediction block (mtp.0.* of a checkpoint without DSpark config): loaded and
// kept; nothing runs it (DSpark checkpoints load as a Drafter instead).
struct MtpWeights {
  LayerWeights block;
  kernels::WeightMatrix e_proj, h_proj;
  std::vector<float> enorm, hnorm, norm;
  HyperConnectionWeights head;
};

// Optional per-call record of intermediate decisions and values (tests and debugging).
struct ForwardTrace {
  std::vector<float> layer_streams;               // [tokens, layers, hc, D]: output of each decoder layer
                                                  // (NaN where window replay skipped the layer)
  std::vector<float> final_hidden;                // [tokens, D]: the LM head's input
  std::vector<std::vector<std::vector<int64_t>>> csa_topk;  // [CSA / CSA2 layer][token]: ascending entry ids
  std::vector<std::vector<Routing>> routing;      // [layer][token] (empty where replay skipped the layer)
  std::vector<std::vector<int64_t>> candidate_blocks;  // V4.1 [token]: ascending blocks kept by the candidate source
};

// Which rows go through the LM head. None: logits must be empty (a prefill chunk whose logits
// nobody reads).
enum class LogitRows { All, Last, None };

// Why decoder window replay (ForwardOptions) cannot run on `config`; "" when it can.
std::string decoder_window_replay_refusal(const ModelConfig& config);

// How one forward call runs; the defaults are the exact forward pass.
struct ForwardOptions {
  LogitRows rows = LogitRows::All;
  // V4.1 decoder-side window replay (docs/MODELS.md; opt-in because it is an approximation): the
  // layers after the last kv source run only on the prompt's last `sliding_window` positions,
  // [prompt_end - sliding_window, prompt_end); rows before that skip them and have no logits.
  // Refused (Error) on a config that does not satisfy the mode's validity conditions.
  bool decoder_window_replay = false;
  // With replay: the absolute position where the prompt ends. -1: the end of this call (the call is
  // the whole prompt or its last chunk). A chunked prefill passes the same value on every chunk and
  // then matches a one-shot replayed prefill bit for bit.
  int64_t prompt_end = -1;
  ForwardTrace* trace = nullptr;
};

// One sequence's part of a batched forward call (Model::forward_batch). `logits` is sized as in
// forward(): [tokens, vocab] for All, [vocab] for Last, empty for None.
struct BatchItem {
  SequenceState* sequence = nullptr;
  std::span<const int32_t> tokens;
  std::span<float> logits;
  LogitRows rows = LogitRows::Last;
  // >= 0: the item's last token is draw `last_token_draw` of the issue_batch_draw call the call
  // names as its draw source, still on the device (Model::chains_draws); tokens.back() is a
  // placeholder.
  int32_t last_token_draw = -1;
  // DSpark (Model::drafter()): [tokens, drafter()->tap_width()] receives every row's taps, the
  // hidden states the drafter's context is made from; empty: none.
  std::span<float> taps = {};
};

struct LoadOptions {
  // The tokenizer.json Engram builds its compressed token map from (transformers' bind_tokenizer);
  // empty: the checkpoint folder's own tokenizer.json.
  std::string tokenizer;
};

class Model {
 public:
  // Reads config.json and the checkpoint in `dir` (V4.1 with Engram: also the tokenizer named by
  // `options`, else `dir`/tokenizer.json); refuses an incomplete or mis-shaped checkpoint, a CSA2
  // schedule it cannot run and an Engram model with no tokenizer.
  static Model load(const std::string& dir, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  int64_t vocab_size() const { return config_.vocab_size; }
  // A sequence whose cache blocks it allocates itself, 64 tokens each, as it grows.
  SequenceState new_sequence() const;
  // A sequence with blocks of `block_tokens` tokens. external_pages: the caller owns the blocks
  // (cache_layout(block_tokens).block_bytes each, e.g. BlockPool payloads) and, before every
  // forward over positions [a, b), sets sequence.pages.blocks[k] for k < blocks_for(b, block_tokens);
  // the forward writes only blocks a / B .. (b - 1) / B and reads the earlier ones. A missing
  // block is an Error, raised before the state changes. Otherwise the sequence allocates them.
  SequenceState new_sequence(int64_t block_tokens, bool external_pages) const;
  // This model's cache: block payload, per-layer regions, fixed-state and snapshot sizes.
  CacheLayout cache_layout(int64_t block_tokens) const;
  // ceil(tokens / block_tokens): the blocks a sequence of `tokens` positions needs.
  static int64_t blocks_for(int64_t tokens, int64_t block_tokens) { return blocks_for_tokens(tokens, block_tokens); }

  // Everything a sequence holds besides its cache blocks, as bytes (snapshot.cpp): the length,
  // per layer the window rows exactly as stored, the compressors' open and overlap rows, the
  // entry counts, V4.1 open groups, the Engram look-back. Taken at a block boundary it is what a
  // resume there needs besides the blocks (docs/ENGINE.md).
  std::vector<std::byte> save_snapshot(const SequenceState& sequence) const;
  // save_snapshot in two halves, for a caller that has issued passes it has not waited for
  // (issue_batch_draw): begin_snapshot copies the state as those passes leave it (the backend's
  // layers frozen behind them, Backend::freeze_layers) and returns at once; finish_snapshot makes
  // the bytes, waiting only for those passes. save_snapshot(s) is finish_snapshot(begin_snapshot(s)).
  struct PendingSnapshot {
    int64_t length = 0;
    int64_t block_tokens = 0;
    std::vector<AttentionState> layers;
    std::vector<int64_t> engram_lookback;
  };
  PendingSnapshot begin_snapshot(const SequenceState& sequence) const;
  std::vector<std::byte> finish_snapshot(PendingSnapshot& pending) const;
  // Into `sequence`, made by new_sequence with the snapshot's block_tokens, whose block table
  // already holds the blocks covering [0, length) as they were when the snapshot was taken.
  // Throws deepinfer::Error (leaving `sequence` unchanged) on a snapshot of another model or
  // block size, a truncated or corrupt one, or missing blocks.
  void restore_snapshot(SequenceState& sequence, std::span<const std::byte> snapshot) const;
  // An upper bound of save_snapshot()'s size at any position: the layout's fixed state at its
  // worst position (CacheLayout::sequence_state_bytes) plus the snapshot's framing.
  int64_t max_snapshot_bytes(int64_t block_tokens) const;

  // Appends `tokens` to the sequence. rows == All: logits is [tokens, vocab], row i for tokens[i];
  // rows == Last: logits is [vocab] for the last token only; rows == None: logits is empty.
  // Refuses image_token_id (text only).
  void forward(SequenceState& sequence, std::span<const int32_t> tokens, std::span<float> logits,
               const ForwardOptions& options) const;
  void forward(SequenceState& sequence, std::span<const int32_t> tokens, std::span<float> logits,
               LogitRows rows = LogitRows::All, ForwardTrace* trace = nullptr) const {
    forward(sequence, tokens, logits, ForwardOptions{.rows = rows, .trace = trace});
  }

  // Runs several sequences in one call: the projections, experts and LM head read each weight
  // once for all rows; attention runs per sequence against its own state. Each item's logits are
  // bit-identical to forward() on that item alone, whatever else is in the batch and however its
  // tokens are chunked (batch invariance: every row is reduced in an order fixed by the row).
  // A sequence appears at most once; items with no tokens are skipped. Decoder window replay and
  // traces are single-sequence options of forward().
  void forward_batch(std::span<const BatchItem> items) const;
  // forward_batch on a backend that draws tokens itself (Backend::draws_tokens): items ask for
  // All their rows (a draft block's verification), their Last row or None, with empty logits;
  // draws[i].row indexes the rows asked for, in item order, and drawn[i] gets the token
  // engine::sample would pick from that row.
  // before_draw (if set) runs on this thread once the pass's device work is issued, right before
  // the draw reads `draws` (ForwardPass::head_draw's before_read): it overlaps the device's work,
  // and it may finish filling what the draws point to (their structured-output masks).
  void forward_batch_draw(std::span<const BatchItem> items, std::span<const TokenDraw> draws,
                          std::span<DrawnToken> drawn, const std::function<void()>& before_draw = {}) const;
  // forward_batch_draw that returns once the pass is issued (Model::chains_draws): the returned
  // handle reads the draws back. Before it is read, the host may issue the next pass with it as
  // draw_source: that pass's items may take their last token from its draws
  // (BatchItem::last_token_draw) without the tokens coming to the host. Passes run in order.
  std::unique_ptr<PendingDraws> issue_batch_draw(std::span<const BatchItem> items, std::span<const TokenDraw> draws,
                                                 const std::function<void()>& before_draw = {},
                                                 const PendingDraws* draw_source = nullptr) const;
  // True when issue_batch_draw and BatchItem::last_token_draw work: the backend chains passes
  // and no part of the model needs the token ids on the host (Engram hashes them there).
  bool chains_draws() const { return backend_->chains_draws() && !engram_; }

  // The first layer that decoder window replay runs on the trailing window only (the one after the
  // last kv source); -1 when the config does not allow the mode (replay_refusal() says why).
  int64_t first_replayed_layer() const { return first_replayed_layer_; }
  const std::string& replay_refusal() const { return replay_refusal_; }

  const std::vector<MtpWeights>& mtp() const { return mtp_; }
  // The DSpark drafter of a checkpoint with dspark_* config and its mtp.* stages; null otherwise.
  const Drafter* drafter() const { return drafter_.get(); }

  // The backend forward calls run on (the CPU's until set). A backend that holds copies of the
  // weights (a GPU's) is made for this model; set it once, before the first forward call.
  const Backend& backend() const { return *backend_; }
  void set_backend(std::shared_ptr<const Backend> backend) { backend_ = std::move(backend); }

  // The weights as loaded, for backends that copy them (all views into the checkpoint mapping).
  const std::vector<LayerWeights>& layers() const { return layers_; }
  const kernels::WeightMatrix& embedding() const { return embed_; }
  HeadWeights head_weights() const {
    return {config_.family == ModelFamily::V41 ? nullptr : &hc_head_, norm_, &head_};
  }
  // V4.1 models with Engram layers: the loaded Engram (hash layout, multipliers, token map).
  const Engram* engram() const { return engram_ ? &*engram_ : nullptr; }

 private:
  explicit Model(ModelConfig config, Weights weights) : config_(std::move(config)), weights_(std::move(weights)) {}
  LayerWeights load_layer(const std::string& prefix, int64_t layer) const;
  // forward() and forward_batch(): `options` other than the defaults need exactly one item.
  // forward_batch_draw's draws; none: the head's logits go to the items.
  struct Draws {
    std::span<const TokenDraw> draws;
    std::span<DrawnToken> drawn;
    bool enabled;
    const std::function<void()>* before_draw = nullptr;
    std::unique_ptr<PendingDraws>* pending = nullptr;  // issue_batch_draw
    const PendingDraws* source = nullptr;               // the draws BatchItem::last_token_draw names
    bool active() const { return enabled; }
  };
  void run(std::span<const BatchItem> items, const ForwardOptions& options) const {
    run(items, options, Draws{{}, {}, false});
  }
  void run(std::span<const BatchItem> items, const ForwardOptions& options, const Draws& draws) const;

  ModelConfig config_;
  Weights weights_;
  HyperConnectionShape hc_shape_;
  kernels::WeightMatrix embed_, head_;
  std::vector<float> norm_;
  HyperConnectionWeights hc_head_;  // V4 only
  std::vector<LayerWeights> layers_;
  std::vector<MtpWeights> mtp_;
  std::shared_ptr<const Drafter> drafter_;
  std::optional<Engram> engram_;  // V4.1 models with Engram layers
  std::shared_ptr<const Backend> backend_ = cpu_backend();
  int64_t first_replayed_layer_ = -1;
  std::string replay_refusal_;
};

}  // namespace deepinfer::model

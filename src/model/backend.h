#pragma once
// The coarse operations a forward call is made of, behind one interface per backend. Model::run
// (model.cpp) holds the V4 family's logic once: which layers run, in what order, on which rows,
// what the trace records, how the head's rows are chosen. A backend holds the numbers: the
// residual streams of every row of the call and the sublayer's input and output live in its
// memory (host for the CPU, device for CUDA) and each operation below reads and writes them
// there. The operations are whole sublayers and boundaries, not single kernels, so a backend
// can fuse inside them (an mHC boundary = post of one site + pre of the next; a MoE layer =
// router, top-k, grouped experts and combine; an attention layer with its compressor and
// indexer; the head) without the model changing.
//
// The CPU backend (cpu_backend.cpp) is the reference: the code in attention.cpp, moe.cpp,
// hyper_connections.cpp and engram.cpp. The CUDA backend lives in backend/cuda.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "model/attention.h"
#include "model/hyper_connections.h"
#include "model/moe.h"

namespace deepinfer::model {

class Engram;
struct SequenceState;

// What stays fixed for every pass over one model.
struct PassShape {
  HyperConnectionShape hc;
  // V4.1 single-pass mHC: a site collapses with the pre of the site before it (the first with a
  // one-hot pre on stream 0) and the head with the last site's; V4 collapses with its own pre and
  // a hyper-head.
  bool single_pass = false;
  float norm_eps = 0;  // the sublayer and final RMSNorms
};

// What a backend may know of a call before it runs it.
struct CallShape {
  int64_t rows = 0;
  // Every row is the next token of its own sequence and the backend draws every token, with no
  // trace, no taps and no window replay: a decode step (the CUDA backend replays a captured graph
  // for it, so nothing may come back to the host before the draws).
  bool decode = false;
  int64_t max_length = 0;  // the longest sequence's length once the call is done
  int64_t block_tokens = 0;  // decode: the sequences' cache block size (one for all of them)
};

// The head's weights: V4's hyper-head (null for V4.1), the final norm, the LM head.
struct HeadWeights {
  const HyperConnectionWeights* hc_head = nullptr;
  std::span<const float> norm;
  const kernels::WeightMatrix* head = nullptr;
};

// DSpark's draft head (drafter.h): the target's head, then a Markov correction from the previous
// draft token and a confidence from the collapsed head input and that token's embedding.
struct DraftHeadWeights {
  HeadWeights head;
  const kernels::WeightMatrix* markov_w1 = nullptr;  // [V, r]: an embedding of the previous token
  const kernels::WeightMatrix* markov_w2 = nullptr;  // [V, r]: r -> V
  std::span<const float> confidence;                 // [D + r]
};

// A token the backend draws from one of the head's logits rows itself (Backend::draws_tokens),
// so that only the token comes back instead of the row: the sampler's inputs (engine/sampler.h
// sample(): parameters, history, random stream) flattened into plain fields, because the model
// knows nothing of the engine. The draw must be the one engine::sample makes for the same row.
struct TokenDraw {
  int64_t row = 0;  // index into the head's rows
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f;
  int32_t top_k = 0;
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f;
  uint64_t seed = 0, request_id = 0;
  int64_t position = 0;
  int32_t logprobs = -1;  // -1: none; else the sampled token's and this many alternatives
  struct Generated {
    int32_t token, count;
    bool in_prompt;
  };
  std::span<const int32_t> prompt_tokens;  // distinct, ascending
  std::span<const Generated> generated;    // distinct, first-seen order
  std::vector<std::pair<int32_t, float>> logit_bias;  // distinct ids
  // A structured-output mask (empty: none): bit i % 64 of word i / 64 allows token i; ids past
  // its words are forbidden. Forbidden logits are -inf for the draw and the logprobs; when no
  // allowed token has a non-NaN logit the draw is mask_fallback_token (the grammar's EOS) with
  // logprob 0, as engine StepExecutor::sample_for answers on the host.
  std::span<const uint64_t> mask;
  int32_t mask_fallback_token = -1;
};

struct DrawnToken {
  int32_t token = -1;
  float logprob = 0;  // NaN without logprobs
  std::vector<std::pair<int32_t, float>> top_logprobs;  // best first, ties to the lower id
};

// A pass's draws issued to the device and not read back yet (head_draw with `pending`): the host
// goes on (it may issue the next pass, chained on these draws: embed's draw_source) while the
// device computes. Destroying it unread waits for the device to be done with it.
class PendingDraws {
 public:
  virtual ~PendingDraws() = default;
  // Blocks until the device has drawn the tokens; fills drawn[i] for draws[i]. Throws
  // deepinfer::Error as head_draw would.
  virtual void wait(std::span<DrawnToken> drawn) = 0;
};

// One forward call's activations and the operations on them. `rows` rows at the start; a call
// runs embed, then per layer [engram], enter_site, attention, exit_site, enter_site, moe,
// exit_site, then head. Not thread-safe; one pass at a time per backend.
class ForwardPass {
 public:
  virtual ~ForwardPass() = default;
  // Every stream of row t = the embedding of tokens[t]; where from_draw (empty, or one per row)
  // names a draw (>= 0), row t's token is instead that draw of draw_source, an earlier pass's
  // draws still on the device (Backend::chains_draws; tokens[t] is a placeholder).
  virtual void embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens,
                     std::span<const int32_t> from_draw, const PendingDraws* draw_source) = 0;
  // V4.1 Engram layer `index` (among Engram layers) into the streams; hash_ids as Engram::hash.
  virtual void engram(const Engram& engram, int index, std::span<const int64_t> hash_ids) = 0;
  // The mHC pre of a site and its RMSNorm: streams -> sublayer input (mix kept for exit_site).
  virtual void enter_site(const HyperConnectionWeights& hc, std::span<const float> norm) = 0;
  // One attention layer: sublayer input -> output, updating the segments' states (attention.h).
  virtual void attention(const AttentionWeights& weights, std::span<const AttentionSegment> segments) = 0;
  // One MoE layer: sublayer input -> output. token_ids: the rows' ids (hash routing).
  virtual void moe(const MoeWeights& weights, std::span<const int32_t> token_ids, std::vector<Routing>* routing) = 0;
  // The mHC post of the open site: sublayer output back into the streams.
  virtual void exit_site() = 0;
  // Forget the first `rows` rows (decoder window replay): row i becomes row i - rows.
  virtual void drop_front_rows(int64_t rows) = 0;
  // Empties a layer's window so that it restarts at `first_position` (decoder window replay: the
  // rows below were never computed for this layer).
  virtual void restart_window(AttentionState& state, int64_t first_position) = 0;
  // The streams of every current row, [rows, hc, D] (traces).
  virtual void read_streams(std::span<float> out) = 0;
  // DSpark taps: each current row's hc streams averaged (summed in stream order, then divided)
  // into columns [tap * D, (tap + 1) * D) of `out` [rows, taps * D], which holds them once
  // finish_taps() has returned. A backend with a device keeps them there and brings them back
  // once, at the end of the pass, instead of waiting for the device at every tap point.
  virtual void tap_streams(int64_t tap, int64_t taps, std::span<float> out) = 0;
  virtual void finish_taps() {}
  // Rows `rows` (current row indices) through collapse, final norm and LM head: logits
  // [rows.size(), vocab] into host memory; hidden (optional) gets the head's input [rows, D].
  virtual void head(const HeadWeights& weights, std::span<const int64_t> rows, float* logits,
                    std::vector<float>* hidden) = 0;
  // The collapsed head input before the final norm, [rows.size(), D] into host memory (the DSpark
  // drafter's confidence feature). Backends that run no drafts refuse.
  virtual void collapse_head(const HeadWeights& weights, std::span<const int64_t> rows, float* collapsed);
  // One DSpark draft stage's attention (attention.h draft_block_attention): sublayer input ->
  // output; each segment is one draft block over its drafter context. Backends that run no
  // drafts refuse.
  virtual void draft_attention(const AttentionWeights& weights, std::span<const AttentionSegment> segments);
  // DSpark's greedy draft head: the pass's rows are anchors.size() blocks of gamma rows. Row k of
  // block r gets logits head(row) + markov_w2 . markov_w1[previous], previous being anchors[r] at
  // k = 0 and the token of row k - 1 after it; its token is their argmax (ties to the lowest id;
  // NaN loses), into tokens[r * gamma + k], and confidence_raw[r * gamma + k] =
  // confidence . [collapsed head input of the row ; markov_w1[previous]]. Only those come back to
  // the host. The default runs collapse_head and head and the rest on the host (draft_head.cpp).
  virtual void greedy_draft_head(const DraftHeadWeights& weights, std::span<const int32_t> anchors, int64_t gamma,
                                 std::span<int32_t> tokens, std::span<float> confidence_raw);
  // As head, but the logits stay in the backend and draws[i] picks a token from row
  // draws[i].row into drawn[i] (Backend::draws_tokens() backends only). Throws deepinfer::Error
  // where engine::sample would (no finite logit, an id outside the vocabulary). before_read (if
  // set) runs once the pass's device work is issued and before `draws` is read: what it does
  // overlaps the device, and it may finish filling what the draws point to (their masks).
  // pending (Backend::chains_draws backends): return once the draws are issued, with `drawn`
  // untouched; *pending reads them back. `draws` need not outlive the call.
  virtual void head_draw(const HeadWeights& weights, std::span<const int64_t> rows, std::span<const TokenDraw> draws,
                         std::span<DrawnToken> drawn, const std::function<void()>* before_read,
                         std::unique_ptr<PendingDraws>* pending);
};

// Where a device's time went, for backends with a device of their own (CUDA), over the passes it
// has finished since load: busy from each pass's first queued work to its last, and the gaps
// between one pass's end and the next one's start, when the device had nothing queued (waiting
// for the host, or for work).
struct DeviceTime {
  double busy_seconds = 0;
  double gap_seconds = 0;
  int64_t passes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu" or "cuda:0 (NVIDIA H200, 139.8 GiB)".
  virtual std::string name() const = 0;
  virtual std::unique_ptr<ForwardPass> begin(const PassShape& shape, const CallShape& call) const = 0;
  // True when passes implement head_draw (the sampler runs where the logits are).
  virtual bool draws_tokens() const { return false; }
  // True when a pass may return with its draws pending (head_draw's `pending`) and the next pass's
  // rows may take their tokens from those draws on the device (embed's from_draw): the host
  // prepares step N + 1 while the device computes step N, and the device never waits for it.
  virtual bool chains_draws() const { return false; }
  // None for the CPU (its passes are the host's own time).
  virtual std::optional<DeviceTime> device_time() const { return std::nullopt; }
  // Where this backend's cache blocks live (the engine's pool, self-owned pages).
  virtual const CacheMemory& cache_memory() const { return host_cache_memory(); }
  // For backends that keep layers' state in their own memory (AttentionState::backend), for
  // snapshots: freeze_layers swaps each such state in `layers` (a copy of a sequence's) for a copy
  // of it as it will be once the work issued so far is done, without waiting for that work, so a
  // snapshot can be taken between two issued passes (chains_draws backends must do this);
  // download_layers gives each such layer of `layers` its host form, waiting for what it needs
  // (a frozen copy: only the work issued before it froze). After a snapshot was restored into
  // sequence.layers, upload_layers makes the backend's copies match it.
  virtual void freeze_layers(std::vector<AttentionState>& /*layers*/) const {}
  virtual void download_layers(std::vector<AttentionState>& /*layers*/) const {}
  virtual void upload_layers(SequenceState& /*sequence*/) const {}
};

// The process-wide CPU backend (stateless; passes run concurrently).
std::shared_ptr<const Backend> cpu_backend();

}  // namespace deepinfer::model

#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "core/error.h"
#include "core/float_formats.h"
#include "model/ops.h"
#include "model/parallel.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::model {
namespace {

// The tokenizer an Engram model hashes with: the explicit one when given, else the checkpoint's.
Tokenizer engram_tokenizer(const std::string& dir, const LoadOptions& options) {
  const std::string own = (std::filesystem::path(dir) / "tokenizer.json").string();
  const std::string& path = options.tokenizer.empty() ? own : options.tokenizer;
  if (std::filesystem::is_regular_file(path)) return Tokenizer::from_file(path);
  if (options.tokenizer.empty())
    fail(dir, ": the model has Engram layers, which need a tokenizer: ", own,
         " does not exist and no tokenizer was given (LoadOptions::tokenizer)");
  // An explicit tokenizer that is missing is an error, not a cue to hash with another one.
  fail(dir, ": the model has Engram layers, which need a tokenizer: the given tokenizer ", path,
       " does not exist (", own, std::filesystem::is_regular_file(own) ? " exists but is not used in its place)" : " does not exist either)");
}

}  // namespace

LayerWeights Model::load_layer(const std::string& prefix, int64_t layer) const {
  return {load_hyper_connection(weights_, prefix, "attn"),
          load_hyper_connection(weights_, prefix, "ffn"),
          weights_.floats(prefix + "attn_norm.weight"),
          weights_.floats(prefix + "ffn_norm.weight"),
          load_attention(weights_, prefix, config_, layer),
          load_moe(weights_, prefix, config_, layer)};
}

Model Model::load(const std::string& dir, const LoadOptions& options) {
  ModelConfig config = load_model_config(dir);
  if (config.family != ModelFamily::V4 && config.family != ModelFamily::V41)
    fail(dir, ": unknown model family");
  Weights weights = Weights::open(dir, config);
  Model model(std::move(config), std::move(weights));
  const ModelConfig& c = model.config_;
  const bool v41 = c.family == ModelFamily::V41;
  model.hc_shape_ = HyperConnectionShape::of(c);
  model.embed_ = model.weights_.matrix("embed.weight");
  model.head_ = model.weights_.matrix("head.weight");
  model.norm_ = model.weights_.floats("norm.weight");
  if (!v41) model.hc_head_ = load_hyper_head(model.weights_, "");
  for (int64_t layer = 0; layer < c.num_layers; ++layer)
    model.layers_.push_back(model.load_layer("layers." + std::to_string(layer) + ".", layer));
  model.drafter_ = Drafter::load(model.weights_, c, model.embed_, model.head_);
  for (int64_t i = 0; i < c.num_mtp_layers && !c.dspark; ++i) {
    const std::string prefix = "mtp." + std::to_string(i) + ".";
    const Weights& w = model.weights_;
    // A checkpoint may leave MTP out (transformers drops mtp.* when it saves).
    if (!w.has(prefix + (v41 ? "attn_norm.weight" : "e_proj.weight"))) continue;
    MtpWeights mtp{model.load_layer(prefix, c.num_layers + i), {}, {}, {}, {}, {}, {}};
    if (!v41) {
      mtp.e_proj = w.matrix(prefix + "e_proj.weight");
      mtp.h_proj = w.matrix(prefix + "h_proj.weight");
      mtp.enorm = w.floats(prefix + "enorm.weight");
      mtp.hnorm = w.floats(prefix + "hnorm.weight");
      mtp.norm = w.floats(prefix + "norm.weight");
      mtp.head = load_hyper_head(w, prefix);
    }
    model.mtp_.push_back(std::move(mtp));
  }
  // Engram hashes compressed token ids, which come from the tokenizer.
  if (!c.engram.layer_ids.empty())
    model.engram_.emplace(Engram::load(c, model.weights_, engram_tokenizer(dir, options)));
  model.replay_refusal_ = decoder_window_replay_refusal(c);
  if (model.replay_refusal_.empty()) model.first_replayed_layer_ = c.num_layers / 2 + 1;
  return model;
}

// The conditions the published implementations check (v4_arch.md §4.3): the layers after the
// midpoint must own nothing but their window, reading the midpoint's ratio-1 compressed KV and
// index keys for every position, and no Engram layer may sit among them.
std::string decoder_window_replay_refusal(const ModelConfig& c) {
  if (c.family != ModelFamily::V41) return "it needs a V4.1 (deepseek_v41) model";
  const int64_t layers = c.num_layers;
  if (layers % 2 != 0) return "num_hidden_layers " + std::to_string(layers) + " is odd";
  const int64_t midpoint = layers / 2;
  if (!c.is_kv_source(midpoint) || c.compress_ratio(midpoint) != 1)
    return "the midpoint layer " + std::to_string(midpoint) + " is not a ratio-1 kv source";
  for (int64_t layer = midpoint + 1; layer < layers; ++layer) {
    if (c.compress_ratio(layer) != 1)
      return "layer " + std::to_string(layer) + " after the midpoint has compress ratio " +
             std::to_string(c.compress_ratio(layer)) + ", not 1";
    if (c.is_kv_source(layer)) return "layer " + std::to_string(layer) + " after the midpoint is a kv source";
  }
  for (int64_t layer = 0; layer < layers; ++layer)
    if (c.is_engram_layer(layer) && layer >= midpoint)
      return "Engram layer " + std::to_string(layer) + " is not below the midpoint " + std::to_string(midpoint);
  return "";
}

SequenceState Model::new_sequence() const { return new_sequence(64, /*external_pages=*/false); }

SequenceState Model::new_sequence(int64_t block_tokens, bool external_pages) const {
  const CacheLayout layout = cache_layout(block_tokens);
  SequenceState sequence;
  sequence.pages.block_tokens = block_tokens;
  sequence.pages.block_bytes = layout.block_bytes;
  sequence.pages.external = external_pages;
  sequence.pages.memory = &backend_->cache_memory();
  for (std::size_t l = 0; l < layers_.size(); ++l)
    sequence.layers.push_back(new_attention_state(layers_[l].attention, config_, layout.layers[l]));
  if (engram_) sequence.engram.emplace(engram_->new_state());
  sequence.bind_pages();
  return sequence;
}

CacheLayout Model::cache_layout(int64_t block_tokens) const { return model::cache_layout(config_, block_tokens); }

void Model::forward(SequenceState& sequence, std::span<const int32_t> tokens, std::span<float> logits,
                    const ForwardOptions& options) const {
  const BatchItem item{.sequence = &sequence, .tokens = tokens, .logits = logits, .rows = options.rows};
  run(std::span(&item, 1), options);
}

void Model::forward_batch(std::span<const BatchItem> items) const { run(items, ForwardOptions{}); }

void Model::forward_batch_draw(std::span<const BatchItem> items, std::span<const TokenDraw> draws,
                               std::span<DrawnToken> drawn, const std::function<void()>& before_draw) const {
  if (!backend_->draws_tokens()) fail("forward: backend ", backend_->name(), " does not draw tokens itself");
  if (draws.size() != drawn.size()) fail("forward: ", draws.size(), " draws into ", drawn.size(), " results");
  run(items, ForwardOptions{}, Draws{draws, drawn, true, before_draw ? &before_draw : nullptr});
}

std::unique_ptr<PendingDraws> Model::issue_batch_draw(std::span<const BatchItem> items,
                                                      std::span<const TokenDraw> draws,
                                                      const std::function<void()>& before_draw,
                                                      const PendingDraws* draw_source) const {
  if (!chains_draws()) fail("forward: backend ", backend_->name(), " does not chain passes for this model");
  std::unique_ptr<PendingDraws> pending;
  run(items, ForwardOptions{}, Draws{draws, {}, true, before_draw ? &before_draw : nullptr, &pending, draw_source});
  return pending;
}

void Model::run(std::span<const BatchItem> all_items, const ForwardOptions& options, const Draws& draws) const {
  const int64_t vocab = config_.vocab_size;
  const int64_t d_model = config_.hidden_size;
  const int64_t n = config_.hc_mult;
  const int64_t num_layers = config_.num_layers;
  ForwardTrace* trace = options.trace;

  std::vector<BatchItem> items;
  for (const BatchItem& item : all_items) {
    if (!item.sequence) fail("forward: a batch item has no sequence");
    const int64_t count = static_cast<int64_t>(item.tokens.size());
    const int64_t logit_rows = item.rows == LogitRows::All ? count : item.rows == LogitRows::Last ? 1 : 0;
    if (count == 0) {
      if (!item.logits.empty()) fail("forward: a batch item with no tokens has ", item.logits.size(), " logits");
      continue;
    }
    const int64_t expected = draws.active() ? 0 : logit_rows * vocab;
    if (static_cast<int64_t>(item.logits.size()) != expected)
      fail("forward: logits hold ", item.logits.size(), " floats, expected ", expected);
    if (static_cast<int64_t>(item.sequence->layers.size()) != num_layers)
      fail("forward: the sequence state was not made by this model");
    for (int32_t id : item.tokens) {
      if (id < 0 || id >= vocab) fail("forward: token id ", id, " outside the vocabulary of ", vocab);
      if (config_.image_token_id && id == *config_.image_token_id)
        fail("forward: token ", id, " is the image token (image_token_id); deepinfer runs text only, images are not supported");
    }
    for (const BatchItem& earlier : items)
      if (earlier.sequence == item.sequence) fail("forward: a sequence appears twice in one batch");
    if (!item.taps.empty()) {
      if (!drafter_) fail("forward: taps asked of a model without a DSpark drafter");
      if (static_cast<int64_t>(item.taps.size()) != count * drafter_->tap_width())
        fail("forward: taps hold ", item.taps.size(), " floats, expected ", count * drafter_->tap_width());
      if (options.decoder_window_replay) fail("forward: taps need every row's hidden states; decoder window replay skips rows");
    }
    if (item.last_token_draw >= 0 && (!draws.pending || !draws.source))
      fail("forward: a batch item takes its token from a draw, which only issue_batch_draw with a draw source allows");
    items.push_back(item);
  }
  if (items.empty()) return;
  // Before any state changes: a missing block leaves every sequence intact.
  for (const BatchItem& item : items)
    item.sequence->pages.cover(item.sequence->length + static_cast<int64_t>(item.tokens.size()));
  const bool single = items.size() == 1;
  if (!single && (options.decoder_window_replay || trace))
    fail("forward: decoder window replay and traces run one sequence at a time (", items.size(), " in this call)");

  // Rows of the call: item i owns rows [row_begin[i], row_begin[i] + tokens).
  std::vector<int64_t> row_begin(items.size());
  std::vector<int64_t> first_position(items.size());
  int64_t count = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    row_begin[i] = count;
    first_position[i] = items[i].sequence->length;
    count += static_cast<int64_t>(items[i].tokens.size());
  }
  std::vector<int32_t> tokens;
  tokens.reserve(static_cast<std::size_t>(count));
  for (const BatchItem& item : items) tokens.insert(tokens.end(), item.tokens.begin(), item.tokens.end());
  // Rows whose token is a draw of the previous pass (chained calls); empty when there is none.
  std::vector<int32_t> from_draw;
  if (std::any_of(items.begin(), items.end(), [](const BatchItem& item) { return item.last_token_draw >= 0; })) {
    from_draw.assign(static_cast<std::size_t>(count), -1);
    for (std::size_t i = 0; i < items.size(); ++i)
      if (items[i].last_token_draw >= 0)
        from_draw[static_cast<std::size_t>(row_begin[i]) + items[i].tokens.size() - 1] = items[i].last_token_draw;
  }

  // Decoder window replay (single item): rows [0, skipped) of this call stop after the last kv source.
  int64_t skipped = 0;
  if (options.decoder_window_replay) {
    const LogitRows rows = items[0].rows;
    const int64_t end_position = first_position[0] + count;
    if (first_replayed_layer_ < 0) fail("forward: decoder window replay is not valid for this model: ", replay_refusal_);
    const int64_t prompt_end = options.prompt_end < 0 ? end_position : options.prompt_end;
    if (prompt_end < end_position)
      fail("forward: decoder window replay: prompt_end ", prompt_end, " is before the end of this call (", end_position, ")");
    skipped = std::clamp<int64_t>(prompt_end - config_.sliding_window - first_position[0], 0, count);
    if (rows == LogitRows::All && skipped > 0)
      fail("forward: decoder window replay skips the decoder layers for the first ", skipped,
           " rows of this call, which have no logits; ask for LogitRows::Last or None");
    if (rows == LogitRows::Last && skipped == count)
      fail("forward: decoder window replay: the last row of this call (position ", end_position - 1,
           ") is before the prompt's trailing window and has no logits; ask for LogitRows::None");
  }
  // V4.1: each site collapses with the pre of the site before it (single-pass mHC).
  const bool single_pass = config_.family == ModelFamily::V41;

  const PassShape shape{hc_shape_, single_pass, static_cast<float>(config_.rms_norm_eps)};
  CallShape call{count, draws.active() && !trace && !options.decoder_window_replay, 0,
                 items.front().sequence->pages.block_tokens};
  for (std::size_t i = 0; i < items.size(); ++i) {
    // Taps are read to the host mid-pass: such a pass is never a replayed decode graph.
    call.decode = call.decode && items[i].tokens.size() == 1 && items[i].rows == LogitRows::Last &&
                  items[i].taps.empty() && items[i].sequence->pages.block_tokens == call.block_tokens;
    call.max_length = std::max(call.max_length, first_position[i] + static_cast<int64_t>(items[i].tokens.size()));
  }
  const std::unique_ptr<ForwardPass> pass = backend_->begin(shape, call);
  pass->embed(embed_, tokens, from_draw, draws.source);
  // DSpark taps: the streams at each tap point, averaged over the hc streams, into the items'
  // columns of that tap.
  const std::vector<int64_t> tap_points =
      std::any_of(items.begin(), items.end(), [](const BatchItem& item) { return !item.taps.empty(); })
          ? dspark_tap_points(config_)
          : std::vector<int64_t>{};
  // [count, taps * D]: every row's taps, complete once the pass has finished them (finish_taps).
  std::vector<float> call_taps(tap_points.empty() ? 0 : static_cast<std::size_t>(count) * tap_points.size() *
                                                            static_cast<std::size_t>(d_model));
  const auto read_taps = [&](int64_t after_layer) {
    for (std::size_t j = 0; j < tap_points.size(); ++j)
      if (tap_points[j] == after_layer)
        pass->tap_streams(static_cast<int64_t>(j), static_cast<int64_t>(tap_points.size()), call_taps);
  };
  // At the end of the pass: the rows' taps to their items.
  const auto finish_taps = [&] {
    if (tap_points.empty()) return;
    pass->finish_taps();
    const auto width = tap_points.size() * static_cast<std::size_t>(d_model);
    for (std::size_t i = 0; i < items.size(); ++i)
      if (!items[i].taps.empty())
        std::copy_n(call_taps.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(row_begin[i]) * width),
                    items[i].taps.size(), items[i].taps.begin());
  };
  read_taps(-1);
  if (trace) {
    trace->layer_streams.assign(static_cast<std::size_t>(count * num_layers * n * d_model), 0.0f);
    trace->csa_topk.clear();
    trace->routing.clear();
    trace->candidate_blocks.clear();
  }
  // Hash ids [rows, engram layers, cols], once per call for every Engram layer.
  std::vector<int64_t> hash_ids;
  if (engram_)
    for (const BatchItem& item : items) {
      const std::vector<int64_t> ids = engram_->hash(*item.sequence->engram, item.tokens);
      hash_ids.insert(hash_ids.end(), ids.begin(), ids.end());
    }

  // The rows still running: all of them, then (replay) only rows [skipped, count) after the cut.
  int64_t active = count;
  int64_t active_first = 0;  // index in the call of the first active row
  std::vector<float> trace_streams;
  // V4.1: each sequence's group picks and candidate blocks of this call.
  std::vector<ChunkSelections> selections(items.size());
  std::vector<AttentionSegment> segments(items.size());
  for (std::size_t i = 0; i < items.size(); ++i)
  {
    segments[i].row_begin = row_begin[i];
    segments[i].rows = static_cast<int64_t>(items[i].tokens.size());
    segments[i].first_position = first_position[i];
  }
  int64_t engram_index = 0;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    if (skipped > 0 && layer == first_replayed_layer_) {
      // Drop the skipped rows from everything per row. The decoder layers' windows restart at the
      // first kept position: rows below it were never computed, so kept rows see no key below it.
      const auto drop = [&](auto& rows_vector, int64_t width) {
        rows_vector.erase(rows_vector.begin(), rows_vector.begin() + skipped * width);
      };
      pass->drop_front_rows(skipped);
      drop(tokens, 1);
      if (selections[0].picks) drop(*selections[0].picks, 1);
      if (selections[0].candidate_blocks) drop(*selections[0].candidate_blocks, 1);
      active -= skipped;
      active_first = skipped;
      segments[0].rows = active;
      segments[0].first_position = first_position[0] + skipped;
      for (int64_t later = layer; later < num_layers; ++later)
        pass->restart_window(items[0].sequence->layers[later], first_position[0] + skipped);
      if (trace) {
        for (int64_t t = 0; t < skipped; ++t)
          for (int64_t later = layer; later < num_layers; ++later)
            std::fill_n(trace->layer_streams.data() + (t * num_layers + later) * n * d_model, n * d_model,
                        std::numeric_limits<float>::quiet_NaN());
      }
    }
    const LayerWeights& w = layers_[layer];
    if (active == 0) {  // the whole call lies before the prompt's trailing window
      if (trace) {
        if (w.attention.shared_compressed) trace->csa_topk.emplace_back(static_cast<std::size_t>(count));
        trace->routing.emplace_back(static_cast<std::size_t>(count));
      }
      continue;
    }
    if (config_.is_engram_layer(layer)) {
      pass->engram(*engram_, static_cast<int>(engram_index), hash_ids);
      ++engram_index;
    }
    pass->enter_site(w.attn_hc, w.attn_norm);
    std::vector<std::vector<int64_t>> picks;
    for (std::size_t i = 0; i < items.size(); ++i) {
      SequenceState& sequence = *items[i].sequence;
      AttentionSegment& segment = segments[i];
      segment.state = &sequence.layers[layer];
      segment.pages = &sequence.pages;
      segment.group = {};
      if (w.attention.shared_compressed)
        segment.group = GroupContext{&sequence.layers[config_.kv_source_of(layer)].group, &selections[i]};
      segment.selected = trace ? &picks : nullptr;
    }
    pass->attention(w.attention, segments);
    pass->exit_site();

    pass->enter_site(w.ffn_hc, w.ffn_norm);
    std::vector<Routing> routing;
    pass->moe(w.moe, tokens, trace ? &routing : nullptr);
    pass->exit_site();
    if (!tap_points.empty()) read_taps(layer);

    if (trace) {
      // Per-token records stay indexed by the call's rows; skipped rows get empty entries.
      if (active_first > 0) {
        picks.insert(picks.begin(), static_cast<std::size_t>(active_first), {});
        routing.insert(routing.begin(), static_cast<std::size_t>(active_first), Routing{});
      }
      if (w.attention.indexer || w.attention.shared_compressed) trace->csa_topk.push_back(std::move(picks));
      trace->routing.push_back(std::move(routing));
      trace_streams.resize(static_cast<std::size_t>(active * n * d_model));
      pass->read_streams(trace_streams);
      for (int64_t t = 0; t < active; ++t)
        std::copy_n(trace_streams.data() + t * n * d_model, n * d_model,
                    trace->layer_streams.data() + ((active_first + t) * num_layers + layer) * n * d_model);
    }
  }
  for (std::size_t i = 0; i < items.size(); ++i) items[i].sequence->length += static_cast<int64_t>(items[i].tokens.size());
  if (trace && selections[0].candidate_blocks)
    for (const std::vector<char>& kept : *selections[0].candidate_blocks) {
      std::vector<int64_t>& blocks = trace->candidate_blocks.emplace_back();
      for (std::size_t b = 0; b < kept.size(); ++b)
        if (kept[b]) blocks.push_back(static_cast<int64_t>(b));
    }

  // Only the rows asked for go through the head, gathered from every item (with replay: active
  // rows only, checked above). Row indices below are in the active rows.
  std::vector<int64_t> head_rows;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const int64_t last = segments[i].row_begin + segments[i].rows;
    if (items[i].rows == LogitRows::All)
      for (int64_t t = segments[i].row_begin; t < last; ++t) head_rows.push_back(t);
    else if (items[i].rows == LogitRows::Last)
      head_rows.push_back(last - 1);
  }
  const int64_t logit_rows = static_cast<int64_t>(head_rows.size());
  if (draws.active()) {
    for (const TokenDraw& draw : draws.draws)
      if (draw.row < 0 || draw.row >= logit_rows)
        fail("forward: a draw reads head row ", draw.row, " of ", logit_rows);
    if (logit_rows > 0)
      pass->head_draw(head_weights(), head_rows, draws.draws, draws.drawn, draws.before_draw, draws.pending);
    else if (draws.before_draw) (*draws.before_draw)();
    finish_taps();
    return;
  }
  if (logit_rows == 0) {
    finish_taps();
    return;
  }
  // The head writes the callers' buffers directly when they lie back to back in item order (one
  // item, or a caller that carved one buffer, as perplexity scoring does); else it writes a
  // scratch buffer that is then scattered. The scratch is left uninitialised: zeroing rows x vocab
  // floats (and faulting their fresh pages in) cost as much as the head itself on small models.
  float* head_out = nullptr;  // the first item's logits, when every later one follows it
  bool contiguous = true;
  const float* next = nullptr;
  for (const BatchItem& item : items) {
    if (item.logits.empty()) continue;
    if (!head_out) head_out = item.logits.data();
    else if (item.logits.data() != next) contiguous = false;
    next = item.logits.data() + item.logits.size();
  }
  std::unique_ptr<float[]> scratch;
  if (!contiguous || !head_out) {
    scratch = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(logit_rows * vocab));
    head_out = scratch.get();
  }
  pass->head(head_weights(), head_rows, head_out, trace ? &trace->final_hidden : nullptr);
  finish_taps();
  if (!scratch) return;
  const float* all_logits = scratch.get();
  int64_t r = 0;
  for (const BatchItem& item : items) {
    const int64_t rows = static_cast<int64_t>(item.logits.size()) / vocab;
    std::copy_n(all_logits + r * vocab, rows * vocab, item.logits.data());
    r += rows;
  }
}

}  // namespace deepinfer::model

#include "model/drafter.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/phase_profile.h"
#include "model/draft_head.h"
#include "model/ops.h"

namespace deepinfer::model {

std::vector<int64_t> dspark_tap_points(const ModelConfig& config) {
  std::vector<int64_t> points;
  if (!config.dspark) return points;
  for (int64_t id : config.dspark->target_layer_ids)
    points.push_back(config.family == ModelFamily::V41 ? id - 1 : id);
  return points;
}

std::unique_ptr<Drafter> Drafter::load(const Weights& weights, const ModelConfig& config,
                                       const kernels::WeightMatrix& embed, const kernels::WeightMatrix& head) {
  if (!config.dspark || config.num_mtp_layers == 0) return nullptr;
  const DsparkConfig& dspark = *config.dspark;
  const std::string last = "mtp." + std::to_string(config.num_mtp_layers - 1) + ".";
  // A checkpoint may leave the drafter out (transformers drops mtp.* when it saves).
  // The Markov tables under either spelling (docs/MODELS.md).
  const bool port_names = weights.has(last + "markov_head.markov_w1.weight");
  const std::string markov_embedding = last + (port_names ? "markov_head.markov_w1.weight" : "markov_head.embed.weight");
  const std::string markov_projection = last + (port_names ? "markov_head.markov_w2.weight" : "markov_head.head.weight");
  if (!weights.has("mtp.0.main_proj.weight") || !weights.has(markov_embedding)) return nullptr;
  DrafterWeights w;
  for (int64_t stage = 0; stage < config.num_mtp_layers; ++stage) {
    const std::string prefix = "mtp." + std::to_string(stage) + ".";
    const int64_t layer = config.num_layers + stage;
    if (config.compress_ratio(layer) != 0)
      fail("config: DSpark stage ", stage, " has compress ratio ", config.compress_ratio(layer),
           "; draft stages are sliding-window only (ratio 0)");
    w.stages.push_back({load_hyper_connection(weights, prefix, "attn"), load_hyper_connection(weights, prefix, "ffn"),
                        weights.floats(prefix + "attn_norm.weight"), weights.floats(prefix + "ffn_norm.weight"),
                        load_attention(weights, prefix, config, layer), load_moe(weights, prefix, config, layer)});
  }
  const int64_t d = config.hidden_size;
  const int64_t taps = static_cast<int64_t>(dspark.target_layer_ids.size());
  w.main_proj = weights.matrix("mtp.0.main_proj.weight");
  if (w.main_proj.rows != d || w.main_proj.cols != taps * d)
    fail("mtp.0.main_proj.weight is [", w.main_proj.rows, ", ", w.main_proj.cols, "], expected [", d, ", ", taps * d, "]");
  w.main_norm = weights.floats("mtp.0.main_norm.weight");
  w.norm = weights.floats(last + "norm.weight");
  if (config.family == ModelFamily::V4) w.hc_head = load_hyper_head(weights, last);
  w.markov_w1 = weights.matrix(markov_embedding);
  w.markov_w2 = weights.matrix(markov_projection);
  w.confidence = weights.floats(last + "confidence_head.proj.weight");
  w.embed = embed;
  w.head = head;
  const PassShape shape{HyperConnectionShape::of(config), config.family == ModelFamily::V41,
                        static_cast<float>(config.rms_norm_eps)};
  return std::unique_ptr<Drafter>(new Drafter(std::move(w), dspark, shape, config.vocab_size, d, config.family));
}

DraftState Drafter::new_state(int64_t first_position) const {
  if (first_position < 0) fail("drafter: a context cannot start at position ", first_position);
  DraftState state;
  state.length = first_position;
  for (const DraftStageWeights& stage : weights_.stages) {
    state.stages.push_back(new_attention_state(stage.attention, ModelConfig{}, LayerCacheBytes{}));
    state.stages.back().window_first = first_position;
  }
  return state;
}

void Drafter::inject(DraftState& state, std::span<const float> taps) const {
  const int64_t width = tap_width();
  if (taps.size() % static_cast<std::size_t>(width) != 0)
    fail("drafter: ", taps.size(), " tap floats are not whole rows of ", width);
  const auto rows = static_cast<int64_t>(taps.size()) / width;
  if (rows == 0) return;
  if (state.stages.size() != weights_.stages.size()) fail("drafter: the state was not made by this drafter");
  std::vector<float> main_x(static_cast<std::size_t>(rows * hidden_));
  kernels::linear(taps.data(), rows, weights_.main_proj, main_x.data());
  for (int64_t t = 0; t < rows; ++t)
    rms_norm(main_x.data() + t * hidden_, hidden_, weights_.main_norm.data(), shape_.norm_eps, main_x.data() + t * hidden_);
  // Each stage's context is its window: the rows its block queries can see.
  for (std::size_t s = 0; s < weights_.stages.size(); ++s) {
    const AttentionWeights& attention = weights_.stages[s].attention;
    store_window_rows(attention, state.stages[s], main_x.data(), rows, attention.window);
  }
  state.length += rows;
}

std::vector<DraftBlock> Drafter::draft(std::span<const DraftRequest> requests, const Backend& backend) const {
  const int64_t gamma = config_.block_size;
  const auto count = static_cast<int64_t>(requests.size());
  std::vector<DraftBlock> blocks(static_cast<std::size_t>(count));
  if (count == 0) return blocks;
  for (int64_t r = 0; r < count; ++r) {
    const DraftRequest& request = requests[r];
    if (!request.state || request.state->stages.size() != weights_.stages.size())
      fail("drafter: request ", r, " has no state made by this drafter");
    if (request.anchor < 0 || request.anchor >= vocab_)
      fail("drafter: anchor token ", request.anchor, " outside the vocabulary of ", vocab_);
    for (int64_t earlier = 0; earlier < r; ++earlier)
      if (requests[earlier].state == request.state) fail("drafter: a state appears twice in one draft call");
  }
  const int64_t rows = count * gamma;
  std::vector<int32_t> ids(static_cast<std::size_t>(rows), static_cast<int32_t>(config_.noise_token_id));
  for (int64_t r = 0; r < count; ++r) ids[r * gamma] = requests[r].anchor;

  std::optional<ScopedPhase> timed_pass(std::in_place, "drafter: pass");
  const std::unique_ptr<ForwardPass> pass = backend.begin(shape_, CallShape{rows, false, 0, 0});
  pass->embed(weights_.embed, ids, {}, nullptr);
  std::vector<AttentionSegment> segments(static_cast<std::size_t>(count));
  for (std::size_t s = 0; s < weights_.stages.size(); ++s) {
    const DraftStageWeights& stage = weights_.stages[s];
    for (int64_t r = 0; r < count; ++r) {
      DraftState& state = *requests[r].state;
      segments[r] = AttentionSegment{&state.stages[s], {}, r * gamma, gamma, state.length, nullptr, nullptr};
    }
    pass->enter_site(stage.attn_hc, stage.attn_norm);
    pass->draft_attention(stage.attention, segments);
    pass->exit_site();
    pass->enter_site(stage.ffn_hc, stage.ffn_norm);
    pass->moe(stage.moe, ids, nullptr);
    pass->exit_site();
  }
  const DraftHeadWeights head = head_weights();
  const bool host_markov = std::any_of(requests.begin(), requests.end(),
                                       [](const DraftRequest& request) { return request.pick || request.keep_logits; });
  if (!host_markov) {
    std::vector<int32_t> anchors, tokens(static_cast<std::size_t>(rows));
    std::vector<float> raw(static_cast<std::size_t>(rows));
    for (const DraftRequest& request : requests) anchors.push_back(request.anchor);
    pass->greedy_draft_head(head, anchors, gamma, tokens, raw);
    timed_pass.reset();
    for (int64_t r = 0; r < count; ++r)
      for (int64_t k = 0; k < gamma; ++k) {
        const auto row = static_cast<std::size_t>(r * gamma + k);
        if (tokens[row] < 0 || tokens[row] >= vocab_)
          fail("drafter: draft token ", tokens[row], " outside the vocabulary of ", vocab_);
        blocks[r].tokens.push_back(tokens[row]);
        blocks[r].confidence_raw.push_back(raw[row]);
        blocks[r].confidence.push_back(sigmoid(raw[row] / static_cast<float>(config_.confidence_temperatures[k])));
      }
    return blocks;
  }
  std::vector<int64_t> all_rows(static_cast<std::size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) all_rows[t] = t;
  std::vector<float> collapsed(static_cast<std::size_t>(rows * hidden_));
  pass->collapse_head(head.head, all_rows, collapsed.data());
  std::vector<float> base(static_cast<std::size_t>(rows * vocab_));
  pass->head(head.head, all_rows, base.data(), nullptr);
  timed_pass.reset();
  const ScopedPhase timed_markov("drafter: markov and picks");
  // The sequential stage on the host: each position's bias depends on the token drawn before it.
  std::vector<float> embedding(static_cast<std::size_t>(weights_.markov_w1.cols));
  for (int64_t r = 0; r < count; ++r) {
    DraftBlock& block = blocks[r];
    block.base_logits.assign(base.begin() + r * gamma * vocab_, base.begin() + (r + 1) * gamma * vocab_);
    block.logits.resize(static_cast<std::size_t>(gamma * vocab_));
    int32_t previous = requests[r].anchor;
    for (int64_t k = 0; k < gamma; ++k) {
      const std::span<float> z = std::span<float>(block.logits).subspan(static_cast<std::size_t>(k * vocab_),
                                                                        static_cast<std::size_t>(vocab_));
      markov_logits(head, previous,
                    std::span<const float>(block.base_logits).subspan(static_cast<std::size_t>(k * vocab_), z.size()),
                    embedding, z);
      const float raw = raw_confidence(
          head, std::span<const float>(collapsed).subspan(static_cast<std::size_t>((r * gamma + k) * hidden_),
                                                          static_cast<std::size_t>(hidden_)),
          embedding);
      block.confidence_raw.push_back(raw);
      block.confidence.push_back(sigmoid(raw / static_cast<float>(config_.confidence_temperatures[k])));
      const ScopedPhase timed_pick("drafter: picks");
      const int32_t token = requests[r].pick ? requests[r].pick(z, k) : greedy_draft_token(z);
      if (token < 0 || token >= vocab_) fail("drafter: draft token ", token, " outside the vocabulary of ", vocab_);
      block.tokens.push_back(token);
      previous = token;
    }
  }
  return blocks;
}

DraftHeadWeights Drafter::head_weights() const {
  const HeadWeights head{family_ == ModelFamily::V4 ? &weights_.hc_head : nullptr, weights_.norm, &weights_.head};
  return DraftHeadWeights{head, &weights_.markov_w1, &weights_.markov_w2, weights_.confidence};
}

}  // namespace deepinfer::model

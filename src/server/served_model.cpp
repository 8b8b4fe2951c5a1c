#include "server/served_model.h"

#include <algorithm>
#include <filesystem>

#include "api/prompt_markers.h"
#include "core/error.h"
#include "grammar/tokenizer_vocabulary.h"

namespace deepinfer::server {

ServedModel::ServedModel(const ServerOptions& options) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(options.model_dir).lexically_normal();
  name_ = options.served_model_name;
  if (name_.empty()) name_ = (dir.has_filename() ? dir.filename() : dir.parent_path().filename()).string();

  tokenizer_origin_ = options.tokenizer;
  if (tokenizer_origin_.empty()) {
    tokenizer_origin_ = (dir / "tokenizer.json").string();
    if (!fs::exists(tokenizer_origin_))
      fail(options.model_dir, ": no tokenizer.json in the model folder; name one with --tokenizer");
  }
  model::LoadOptions load_options;
  load_options.tokenizer = options.tokenizer;
  model_ = std::make_unique<model::Model>(model::Model::load(options.model_dir, load_options));
  if (options.on_model_loaded) options.on_model_loaded(*model_);
  const ModelConfig& config = model_->config();
  format_ = config.family == ModelFamily::V41 ? api::PromptFormat::V41 : api::PromptFormat::V4;
  encoder_ = std::make_unique<api::PromptEncoder>(Tokenizer::from_file(tokenizer_origin_), format_);

  for (int64_t id : config.eos_token_ids) eos_token_ids_.push_back(static_cast<int32_t>(id));
  if (eos_token_ids_.empty()) {
    if (auto eos = tokenizer().eos_id()) eos_token_ids_.push_back(*eos);
  }
  for (int32_t id : eos_token_ids_)
    if (id < 0 || id >= model_->vocab_size())
      fail(options.model_dir, ": eos_token_id ", id, " is outside the model's vocabulary (", model_->vocab_size(), ")");

  // The grammar's EOS is the model's first end-of-sequence id: the one it ends answers with.
  constraints_ = std::make_unique<api::ConstraintCompiler>(
      grammar::vocabulary_for(tokenizer(), eos_token_ids_.empty() ? std::optional<int32_t>{} : eos_token_ids_.front()),
      options.constraints,
      // Forced text (jump-forward) is encoded as the prompt encoder encodes text: markup such as
      // DSML's tags comes out as the ids the model read it in. A copy shares the tokenizer's data.
      [tokenizer = tokenizer()](std::string_view text) { return tokenizer.encode(text); });
  think_end_id_ = tokenizer().token_to_id(api::markers::kThinkEnd).value_or(-1);

  engine_options_ = options.engine;
  engine_options_.speculative = options.speculative.value_or(
      model_->drafter() ? engine::SpeculativeMode::scheduled : engine::SpeculativeMode::off);
  engine_ = std::make_unique<engine::Engine>(*model_, engine_options_);

  // The longest sequence the cache can ever hold alone: its blocks minus those of the fixed state
  // (the scheduler refuses anything longer).
  const model::CacheLayout layout = model_->cache_layout(engine_options_.block_tokens);
  const int64_t state_blocks =
      layout.block_bytes > 0 ? (layout.sequence_state_bytes() + layout.block_bytes - 1) / layout.block_bytes : 0;
  total_blocks_ = layout.block_bytes > 0 ? engine_options_.cache_memory_bytes / layout.block_bytes : 0;
  const int64_t cache_tokens = (total_blocks_ - state_blocks) * engine_options_.block_tokens;
  context_length_ = std::min(config.max_position_embeddings > 0 ? config.max_position_embeddings : cache_tokens,
                             cache_tokens);
  if (options.max_model_len) {
    if (*options.max_model_len < 2) fail("--max-model-len must be at least 2, got ", *options.max_model_len);
    context_length_ = std::min(context_length_, *options.max_model_len);
  }
  if (context_length_ < 2)
    fail("the cache memory (", engine_options_.cache_memory_bytes, " bytes) holds no useful sequence: raise --cache-memory");
  if (options.default_max_tokens) {
    if (*options.default_max_tokens < 1) fail("--default-max-tokens must be at least 1, got ", *options.default_max_tokens);
    default_max_tokens_ = options.default_max_tokens;
  }
}

void InFlightRequests::add(engine::RequestId id) {
  std::lock_guard lock(mutex_);
  ids_.insert(id);
}

void InFlightRequests::remove(engine::RequestId id) {
  std::lock_guard lock(mutex_);
  ids_.erase(id);
}

std::size_t InFlightRequests::size() const {
  std::lock_guard lock(mutex_);
  return ids_.size();
}

std::size_t InFlightRequests::cancel_all(engine::Engine& engine) {
  std::set<engine::RequestId> ids;
  {
    std::lock_guard lock(mutex_);
    ids = ids_;
  }
  for (engine::RequestId id : ids) engine.cancel(id);
  return ids.size();
}

ServedModel::~ServedModel() = default;

}  // namespace deepinfer::server

#pragma once
// The loaded model and everything a request needs to reach it: tokenizer, prompt encoder, the
// engine, the served name and the context limit. Shared read-only by all handler threads (the
// engine is thread-safe).
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "api/conversation.h"
#include "api/output_constraint.h"
#include "api/prompt_tokens.h"
#include "engine/engine.h"
#include "io/tokenizer/tokenizer.h"
#include "model/model.h"
#include "server/server_options.h"

namespace deepinfer::server {

// The engine requests the server has submitted and not yet finished with, so a shutdown whose
// drain deadline passed can cancel them all (server.cpp).
class InFlightRequests {
 public:
  void add(engine::RequestId id);
  void remove(engine::RequestId id);
  std::size_t size() const;
  // Cancels every request still in flight; returns how many.
  std::size_t cancel_all(engine::Engine& engine);

 private:
  mutable std::mutex mutex_;
  std::set<engine::RequestId> ids_;
};

class ServedModel {
 public:
  // Loads the checkpoint, hands it to options.on_model_loaded (when set), then starts the engine.
  // Throws deepinfer::Error for a bad folder, tokenizer or options (and passes on the hook's).
  explicit ServedModel(const ServerOptions& options);
  ~ServedModel();

  const std::string& name() const { return name_; }
  const model::Model& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return encoder_->tokenizer(); }
  const api::PromptEncoder& encoder() const { return *encoder_; }
  api::PromptFormat format() const { return format_; }
  engine::Engine& engine() { return *engine_; }
  const engine::EngineOptions& engine_options() const { return engine_options_; }
  // prompt + max_tokens may not exceed this.
  int64_t context_length() const { return context_length_; }
  // max_tokens of a request that names none (--default-max-tokens; none: the rest of the context).
  std::optional<int64_t> default_max_tokens() const { return default_max_tokens_; }
  InFlightRequests& in_flight() { return in_flight_; }
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }
  // Structured output: constraints compiled against this tokenizer, cached (thread-safe).
  api::ConstraintCompiler& constraints() const { return *constraints_; }
  // The token after which a thinking answer's constraint applies (</think>), or -1.
  int32_t think_end_id() const { return think_end_id_; }
  // Cache blocks the engine's memory holds (as its block pool divides it).
  int64_t total_blocks() const { return total_blocks_; }
  // Where the tokenizer came from, for the startup line.
  const std::string& tokenizer_origin() const { return tokenizer_origin_; }

 private:
  std::string name_;
  std::unique_ptr<model::Model> model_;
  api::PromptFormat format_ = api::PromptFormat::V41;
  std::unique_ptr<api::PromptEncoder> encoder_;
  std::string tokenizer_origin_;
  engine::EngineOptions engine_options_;
  std::unique_ptr<engine::Engine> engine_;
  int64_t context_length_ = 0;
  std::optional<int64_t> default_max_tokens_;
  InFlightRequests in_flight_;
  int64_t total_blocks_ = 0;
  std::vector<int32_t> eos_token_ids_;
  std::unique_ptr<api::ConstraintCompiler> constraints_;
  int32_t think_end_id_ = -1;
};

}  // namespace deepinfer::server

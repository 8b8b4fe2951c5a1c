// A step whose compute fails (on a GPU: the device out of memory in the middle of a pass, where a
// new sequence's state or a larger arena buffer is allocated) ends the requests of that step with
// the error and costs nothing else: requests not in it finish with their usual tokens, new ones
// are served, and every block comes back.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine_checks.h"
#include "tiny_model.h"
#include "model/backend.h"
#include "model/model.h"

namespace deepinfer::engine {
namespace {

using Tokens = std::vector<int32_t>;

// The inner pass, except that its third attention layer throws, leaving the call's sequences
// partly advanced as a real failure would.
class FailingPass final : public model::ForwardPass {
 public:
  explicit FailingPass(std::unique_ptr<model::ForwardPass> inner) : inner_(std::move(inner)) {}
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
    if (++layers_ == 3) fail("injected: out of memory on the device");
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
  void head(const model::HeadWeights& weights, std::span<const int64_t> rows, float* logits,
            std::vector<float>* hidden) override {
    inner_->head(weights, rows, logits, hidden);
  }

 private:
  std::unique_ptr<model::ForwardPass> inner_;
  int layers_ = 0;
};

// The CPU backend, whose one call that brings a sequence to `fail_at_length` tokens fails.
class FailingBackend final : public model::Backend {
 public:
  explicit FailingBackend(int64_t fail_at_length) : fail_at_length_(fail_at_length) {}
  std::string name() const override { return "cpu, failing once"; }
  std::unique_ptr<model::ForwardPass> begin(const model::PassShape& shape, const model::CallShape& call) const override {
    std::unique_ptr<model::ForwardPass> pass = model::cpu_backend()->begin(shape, call);
    if (call.max_length == fail_at_length_ && !failed_.exchange(true)) return std::make_unique<FailingPass>(std::move(pass));
    return pass;
  }
  bool failed() const { return failed_; }

 private:
  int64_t fail_at_length_;
  mutable std::atomic<bool> failed_{false};
};

struct Outcome {
  Tokens tokens;
  FinishReason finish = FinishReason::Error;
  std::string error;
};

Outcome read_all(RequestStream& stream) {
  Outcome out;
  while (true) {
    std::optional<StreamEvent> event = stream.next(std::chrono::seconds(60));
    if (!event) throw std::runtime_error("no event within 60 s");
    for (const GeneratedToken& token : event->tokens) out.tokens.push_back(token.token);
    if (event->finish) {
      out.finish = *event->finish;
      out.error = event->error;
      return out;
    }
  }
}

GenerationRequest greedy(Tokens prompt, int64_t max_tokens) {
  GenerationRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 0;
  request.max_tokens = max_tokens;
  return request;
}

TEST(StepFailureTest, EndsOnlyTheFailedStepsRequests) {
  // Reference tokens: the same requests on a backend that never fails.
  model::Model reference = testing::load_tiny_v4();
  EngineOptions options;
  options.cache_memory_bytes = 64 << 20;
  options.block_tokens = 8;
  options.max_batch_tokens = 32;
  options.max_running = 1;  // the second request waits while the first one runs (and fails)
  const GenerationRequest first = greedy({5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49}, 20);  // lengths 13 .. 31
  const GenerationRequest second = greedy({7, 8, 9, 10, 11, 12, 13, 14, 15}, 6);                // lengths 10 .. 14
  const GenerationRequest third = greedy({100, 200, 300}, 5);
  Tokens expected_second, expected_third;
  {
    Engine engine(reference, options);
    expected_second = read_all(*engine.submit(second)).tokens;
    expected_third = read_all(*engine.submit(third)).tokens;
  }

  model::Model model = testing::load_tiny_v4();
  auto failing = std::make_shared<FailingBackend>(/*fail_at_length=*/18);  // the first request's 6th decode
  model.set_backend(failing);
  Engine engine(model, options);
  const std::shared_ptr<RequestStream> first_stream = engine.submit(first);
  const std::shared_ptr<RequestStream> second_stream = engine.submit(second);
  const Outcome failed = read_all(*first_stream);
  EXPECT_TRUE(failing->failed());
  EXPECT_EQ(failed.finish, FinishReason::Error);
  EXPECT_NE(failed.error.find("injected: out of memory on the device"), std::string::npos) << failed.error;
  // The prompt's call (length 12) and the decodes to lengths 13 .. 17 each gave a token.
  EXPECT_EQ(failed.tokens.size(), 6u);

  const Outcome waited = read_all(*second_stream);
  EXPECT_EQ(waited.finish, FinishReason::Length) << waited.error;
  EXPECT_EQ(waited.tokens, expected_second);
  const Outcome later = read_all(*engine.submit(third));
  EXPECT_EQ(later.finish, FinishReason::Length) << later.error;
  EXPECT_EQ(later.tokens, expected_third);

  EXPECT_EQ(engine.stats().failed_steps, 1);
  testing::expect_everything_returned(engine);
}

}  // namespace
}  // namespace deepinfer::engine

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
#include "forwarding_pass.h"
#include "tiny_model.h"
#include "model/backend.h"
#include "model/model.h"

namespace deepinfer::engine {
namespace {

using Tokens = std::vector<int32_t>;

// The inner pass, except that its third attention layer throws, leaving the call's sequences
// partly advanced as a real failure would.
class FailingPass final : public testing::ForwardingPass {
 public:
  using ForwardingPass::ForwardingPass;
  void attention(const model::AttentionWeights& weights, std::span<const model::AttentionSegment> segments) override {
    if (++layers_ == 3) fail("injected: out of memory on the device");
    inner().attention(weights, segments);
  }

 private:
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

using testing::Answer;
using testing::ids;
using testing::read_answer;

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
    expected_second = ids(read_answer(*engine.submit(second)));
    expected_third = ids(read_answer(*engine.submit(third)));
  }

  model::Model model = testing::load_tiny_v4();
  auto failing = std::make_shared<FailingBackend>(/*fail_at_length=*/18);  // the first request's 6th decode
  model.set_backend(failing);
  Engine engine(model, options);
  const std::shared_ptr<RequestStream> first_stream = engine.submit(first);
  const std::shared_ptr<RequestStream> second_stream = engine.submit(second);
  const Answer failed = read_answer(*first_stream);
  EXPECT_TRUE(failing->failed());
  EXPECT_EQ(failed.finish, FinishReason::Error);
  EXPECT_NE(failed.error.find("injected: out of memory on the device"), std::string::npos) << failed.error;
  // The prompt's call (length 12) and the decodes to lengths 13 .. 17 each gave a token.
  EXPECT_EQ(failed.tokens.size(), 6u);

  const Answer waited = read_answer(*second_stream);
  EXPECT_EQ(waited.finish, FinishReason::Length) << waited.error;
  EXPECT_EQ(ids(waited), expected_second);
  const Answer later = read_answer(*engine.submit(third));
  EXPECT_EQ(later.finish, FinishReason::Length) << later.error;
  EXPECT_EQ(ids(later), expected_third);

  EXPECT_EQ(engine.stats().failed_steps, 1);
  testing::expect_everything_returned(engine);
}

}  // namespace
}  // namespace deepinfer::engine

#include "cli/bench_stream.h"

#include <gtest/gtest.h>

namespace deepinfer::cli::bench {
namespace {

std::string event(const std::string& data) { return "data: " + data + "\n\n"; }

TEST(StreamMeter, CompletionsTimingsUsageAndReply) {
  StreamMeter meter(Endpoint::Completions);
  EXPECT_TRUE(meter.receive(event(R"({"choices":[{"index":0,"text":"Hel"}],"usage":null})"), 0.10));
  EXPECT_TRUE(meter.receive(event(R"({"choices":[{"index":0,"text":""}]})"), 0.20));  // no token
  EXPECT_TRUE(meter.receive(event(R"({"choices":[{"index":0,"text":"lo"}]})"), 0.30));
  EXPECT_TRUE(meter.receive(event(R"({"choices":[{"index":0,"text":"!","finish_reason":"length"}]})") +
                                event(R"({"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":3,)"
                                      R"("prompt_cache_hit_tokens":32,"prompt_cache_miss_tokens":8}})") +
                                event("[DONE]"),
                            0.60));
  const RequestResult r = meter.finish(0.65);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.10);
  ASSERT_EQ(r.itl_s.size(), 2u);
  EXPECT_NEAR(r.itl_s[0], 0.20, 1e-12);
  EXPECT_NEAR(r.itl_s[1], 0.30, 1e-12);
  EXPECT_DOUBLE_EQ(r.latency_s, 0.65);
  EXPECT_EQ(r.token_chunks, 3);
  EXPECT_TRUE(r.usage_reported);
  EXPECT_EQ(r.prompt_tokens, 40);
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_EQ(r.cached_prompt_tokens, 32);
  EXPECT_EQ(r.reply, "Hello!");
}

TEST(StreamMeter, ChatCountsReasoningAndContentButNotTheRoleChunk) {
  StreamMeter meter(Endpoint::Chat);
  meter.receive(event(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})"), 0.05);
  meter.receive(event(R"({"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]})"), 0.25);
  meter.receive(event(R"({"choices":[{"index":0,"delta":{"content":"Hi"}}]})"), 0.40);
  meter.receive(event(R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,)"
                      R"("prompt_tokens_details":{"cached_tokens":4}}})"),
                0.45);
  meter.receive(event("[DONE]"), 0.46);
  const RequestResult r = meter.finish(0.5);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.ttft_s, 0.25);
  ASSERT_EQ(r.itl_s.size(), 1u);
  EXPECT_NEAR(r.itl_s[0], 0.15, 1e-12);
  EXPECT_EQ(r.cached_prompt_tokens, 4);
  EXPECT_EQ(r.reply, "Hi");  // reasoning is not part of the next turn's history
}

TEST(StreamMeter, WithoutUsageOutputTokensAreChunks) {
  StreamMeter meter(Endpoint::Completions);
  meter.receive(event(R"({"choices":[{"text":"a"}]})") + event(R"({"choices":[{"text":"b"}]})") + event("[DONE]"), 1.0);
  const RequestResult r = meter.finish(1.0);
  ASSERT_TRUE(r.ok);
  EXPECT_FALSE(r.usage_reported);
  EXPECT_EQ(r.output_tokens, 2);
}

TEST(StreamMeter, ErrorEventFailsAndStopsReading) {
  StreamMeter meter(Endpoint::Completions);
  EXPECT_TRUE(meter.receive(event(R"({"choices":[{"text":"a"}]})"), 0.1));
  EXPECT_FALSE(meter.receive(event(R"({"error":{"message":"engine overloaded","type":"server_error"}})"), 0.2));
  const RequestResult r = meter.finish(0.3);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "error in stream: engine overloaded");
}

TEST(StreamMeter, MalformedTruncatedAndEmptyStreamsFail) {
  StreamMeter malformed(Endpoint::Completions);
  EXPECT_FALSE(malformed.receive(event("{not json"), 0.1));
  EXPECT_NE(malformed.finish(0.1).error.find("malformed stream chunk"), std::string::npos);

  StreamMeter truncated(Endpoint::Completions);
  truncated.receive(event(R"({"choices":[{"text":"a"}]})"), 0.1);
  const RequestResult t = truncated.finish(0.2);
  EXPECT_FALSE(t.ok);
  EXPECT_EQ(t.error, "the stream ended before [DONE]");

  StreamMeter empty(Endpoint::Completions);
  empty.receive(event(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":0}})") + event("[DONE]"), 0.1);
  const RequestResult e = empty.finish(0.2);
  EXPECT_FALSE(e.ok);
  EXPECT_EQ(e.error, "the stream carried no token");
}

TEST(StreamMeter, EventsAfterDoneAreIgnored) {
  StreamMeter meter(Endpoint::Completions);
  meter.receive(event(R"({"choices":[{"text":"a"}]})") + event("[DONE]") + event(R"({"choices":[{"text":"late"}]})"),
                0.1);
  const RequestResult r = meter.finish(0.2);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.token_chunks, 1);
  EXPECT_EQ(r.reply, "a");
}

}  // namespace
}  // namespace deepinfer::cli::bench

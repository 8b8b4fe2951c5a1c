// Protocol writers beyond what the conformance vectors cover: thinking deltas, usage with
// reasoning tokens, the include_usage switch, Anthropic tool_use blocks and stop sequences, SSE.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/chunk_anthropic_messages.h"
#include "api/chunk_chat_completions.h"
#include "api/output_processor.h"
#include "api/sse_format.h"
#include "core/error.h"

namespace deepinfer::api {
namespace {

std::vector<StreamEvent> run(OutputParsingOptions options, const std::vector<std::string>& pieces,
                             BackendFinish finish = BackendFinish::stop) {
  OutputProcessor processor(std::move(options));
  std::vector<StreamEvent> events = processor.ready({"fp-9", 12, 8});
  for (const std::string& piece : pieces)
    for (StreamEvent& event : processor.text(piece, 1)) events.push_back(std::move(event));
  for (StreamEvent& event : processor.finish(finish)) events.push_back(std::move(event));
  return events;
}

const std::string kCall =
    "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"q\" "
    "string=\"true\">hi</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

TEST(ChatCompletionsChunkWriter, ThinkingStreamWithReasoningTokenUsage) {
  OutputParsingOptions options;
  options.thinking = true;
  ChatCompletionsChunkWriter writer({"r1", "deepseek-v4-flash", 5, /*thinking=*/true,
                                     /*include_usage=*/false, /*reasoning_tokens=*/true});
  std::vector<WireJson> chunks;
  for (const StreamEvent& event : run(options, {"Hm", "m.", "</think>", "Yes"}))
    for (WireJson& chunk : writer.write(event)) chunks.push_back(std::move(chunk));
  ASSERT_EQ(chunks.size(), 5u);  // start, "Hm", "m.", "Yes", finish
  EXPECT_EQ(chunks[0]["choices"][0]["delta"],
            WireJson::parse(R"({"role":"assistant","content":null,"reasoning_content":""})"));
  EXPECT_EQ(chunks[1]["choices"][0]["delta"],
            WireJson::parse(R"({"content":null,"reasoning_content":"Hm"})"));
  EXPECT_EQ(chunks[3]["choices"][0]["delta"],
            WireJson::parse(R"({"content":"Yes","reasoning_content":null})"));
  EXPECT_FALSE(chunks[3].contains("usage"));  // include_usage off: no key before the last chunk
  EXPECT_EQ(chunks[0]["system_fingerprint"], "fp-9");
  const WireJson& last = chunks[4];
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(last["usage"], WireJson::parse(R"({"prompt_tokens":12,"completion_tokens":4,
      "total_tokens":16,"prompt_tokens_details":{"cached_tokens":8},
      "completion_tokens_details":{"reasoning_tokens":3},
      "prompt_cache_hit_tokens":8,"prompt_cache_miss_tokens":4})"));
}

TEST(ChatCompletionsBody, StopSequenceAndToolCalls) {
  OutputParsingOptions options;
  options.parse_tool_calls = true;
  options.stop_sequences = {"!"};
  const ChatCompletionsFormat format{"r2", "m", 5, false, true, true};
  CollectedOutput stopped;
  for (const StreamEvent& event : run(options, {"Hi! there"})) stopped.add(event);
  WireJson body = chat_completion_body(format, stopped);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hi");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");

  CollectedOutput called;
  for (const StreamEvent& event : run(options, {kCall})) called.add(event);
  body = chat_completion_body(format, called);
  EXPECT_EQ(body["choices"][0]["message"]["tool_calls"][0]["id"], "call_r2_0");
  EXPECT_EQ(body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"q\": \"hi\"}");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_THROW(chat_completion_body(format, CollectedOutput{}), deepinfer::Error);
}

std::vector<MessagesEvent> messages_events(OutputParsingOptions options,
                                           const std::vector<std::string>& pieces,
                                           BackendFinish finish = BackendFinish::stop) {
  MessagesEventWriter writer({"msg1", "m"});
  std::vector<MessagesEvent> out;
  for (const StreamEvent& event : run(std::move(options), pieces, finish))
    for (MessagesEvent& sse : writer.write(event)) out.push_back(std::move(sse));
  return out;
}

std::vector<std::string> types(const std::vector<MessagesEvent>& events) {
  std::vector<std::string> names;
  for (const MessagesEvent& event : events) names.push_back(event.type);
  return names;
}

TEST(MessagesEventWriter, ThinkingThenToolUseBlocks) {
  OutputParsingOptions options;
  options.thinking = true;
  options.parse_tool_calls = true;
  const std::vector<MessagesEvent> events = messages_events(options, {"plan</think>", kCall});
  EXPECT_EQ(types(events),
            (std::vector<std::string>{"message_start", "content_block_start", "ping",
                                      "content_block_delta", "content_block_delta",
                                      "content_block_stop", "content_block_start",
                                      "content_block_delta", "content_block_delta",
                                      "content_block_delta", "content_block_delta",
                                      "content_block_delta", "content_block_delta",
                                      "content_block_delta", "content_block_stop",
                                      "message_delta", "message_stop"}));
  EXPECT_EQ(events[0].data["message"]["usage"]["input_tokens"], 4);
  EXPECT_EQ(events[0].data["message"]["usage"]["cache_read_input_tokens"], 8);
  EXPECT_EQ(events[4].data["delta"], WireJson::parse(R"({"type":"signature_delta","signature":"msg1"})"));
  EXPECT_EQ(events[6].data["content_block"],
            WireJson::parse(R"({"type":"tool_use","id":"toolu_msg1_0","name":"f","input":{}})"));
  std::string partial_json;
  for (std::size_t i = 7; i <= 13; ++i) {
    EXPECT_EQ(events[i].data["delta"]["type"], "input_json_delta");
    partial_json += events[i].data["delta"]["partial_json"].get<std::string>();
  }
  EXPECT_EQ(partial_json, "{\"q\": \"hi\"}");
  EXPECT_EQ(events[15].data["delta"]["stop_reason"], "tool_use");
}

TEST(MessagesEventWriter, StopSequenceAndMaxTokens) {
  OutputParsingOptions options;
  options.stop_sequences = {"##"};
  std::vector<MessagesEvent> events = messages_events(options, {"a#", "#b"});
  EXPECT_EQ(events[events.size() - 2].data["delta"],
            WireJson::parse(R"({"stop_reason":"stop_sequence","stop_sequence":"##"})"));
  events = messages_events({}, {"a"}, BackendFinish::length);
  EXPECT_EQ(events[events.size() - 2].data["delta"]["stop_reason"], "max_tokens");
}

TEST(SseFormat, Framing) {
  const WireJson payload = WireJson::parse(R"({"type":"ping","b":1,"a":"\u00e9"})");
  EXPECT_EQ(sse_data(payload), "data: {\"type\":\"ping\",\"b\":1,\"a\":\"\xC3\xA9\"}\n\n");
  EXPECT_EQ(sse_event("ping", WireJson{{"type", "ping"}}), "event: ping\ndata: {\"type\":\"ping\"}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  // Bytes that are not UTF-8 do not break the stream.
  EXPECT_EQ(wire_text(WireJson(std::string("a\xFF"))), "\"a\xEF\xBF\xBD\"");
}

}  // namespace
}  // namespace deepinfer::api

// The recipe's output conformance vectors (tests/data/conformance/output_vectors.jsonl, from the
// Rust deepseek-recipe goldens): backend chunks in, exact protocol JSON out. "<any>" in an
// expected value matches anything (timestamps); keys must also come in the expected order.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/chunk_anthropic_messages.h"
#include "api/chunk_chat_completions.h"
#include "api/output_collector.h"
#include "api/output_processor.h"
#include "api/output_responses_body.h"
#include "api/output_token_pieces.h"
#include "api_test_support.h"
#include "io/tokenizer/tokenizer.h"

namespace deepinfer::api {
namespace {

using testing::v41_tokenizer;

struct Vector {
  std::string name;
  WireJson data;
};

std::vector<Vector> load_vectors() {
  std::ifstream in(DEEPINFER_TEST_DATA_DIR "/conformance/output_vectors.jsonl");
  std::vector<Vector> vectors;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    WireJson data = WireJson::parse(line);
    vectors.push_back({data.at("name").get<std::string>(), std::move(data)});
  }
  return vectors;
}

// Empty when `actual` matches `expected`, else the first difference.
std::string difference(const WireJson& actual, const WireJson& expected, const std::string& path) {
  if (expected.is_string() && expected.get<std::string>() == "<any>") return "";
  if (expected.is_object()) {
    if (!actual.is_object()) return path + ": expected an object, got " + actual.dump();
    if (actual.size() != expected.size())
      return path + ": keys differ: got " + actual.dump() + " expected " + expected.dump();
    auto a = actual.begin();
    for (auto e = expected.begin(); e != expected.end(); ++e, ++a) {
      if (a.key() != e.key()) return path + ": key '" + a.key() + "' where '" + e.key() + "' expected";
      std::string inner = difference(a.value(), e.value(), path + "." + e.key());
      if (!inner.empty()) return inner;
    }
    return "";
  }
  if (expected.is_array()) {
    if (!actual.is_array() || actual.size() != expected.size())
      return path + ": got " + actual.dump() + " expected " + expected.dump();
    for (std::size_t i = 0; i < expected.size(); ++i) {
      std::string inner = difference(actual[i], expected[i], path + "[" + std::to_string(i) + "]");
      if (!inner.empty()) return inner;
    }
    return "";
  }
  return actual == expected ? "" : path + ": got " + actual.dump() + " expected " + expected.dump();
}

// What the request adapters decide for the parser (docs/recipe.md §2.1, §3).
struct RequestView {
  bool thinking = true;
  OutputParsingOptions parsing;
};

RequestView view_request(const WireJson& request, const std::string& protocol) {
  RequestView view;
  if (protocol == "responses") {
    // Responses ignores a top-level "thinking"; reasoning.effort "none" turns it off.
    view.thinking = !(request.contains("reasoning") &&
                      request["reasoning"].value("effort", "") == "none");
  } else if (request.contains("thinking")) {
    view.thinking = request["thinking"].value("type", "enabled") != "disabled";
  } else if (request.value("reasoning_effort", "") == "none") {
    view.thinking = false;
  }
  OutputParsingOptions& parsing = view.parsing;
  parsing.thinking = view.thinking;
  const bool has_tools = request.contains("tools") && !request["tools"].empty();
  const WireJson tool_choice = request.value("tool_choice", WireJson("auto"));
  parsing.parse_tool_calls = has_tools && tool_choice != "none";
  parsing.start_in_tool_calls = parsing.parse_tool_calls && tool_choice == "required";
  parsing.json_output = request.contains("response_format") &&
                        request["response_format"].value("type", "") == "json_object";
  if (request.contains("stop")) {
    if (request["stop"].is_string())
      parsing.stop_sequences.push_back(request["stop"].get<std::string>());
    else
      for (const auto& stop : request["stop"]) parsing.stop_sequences.push_back(stop.get<std::string>());
  }
  return view;
}

// Feeds the vector's backend chunks; returns every event in order.
std::vector<StreamEvent> run_chunks(const WireJson& chunks, OutputParsingOptions parsing) {
  OutputProcessor processor(std::move(parsing));
  std::vector<StreamEvent> events;
  auto take = [&](std::vector<StreamEvent> more) {
    for (StreamEvent& event : more) events.push_back(std::move(event));
  };
  for (const WireJson& chunk : chunks) {
    const std::string kind = chunk.at("kind");
    if (kind == "ready") {
      PromptUsage prompt;
      if (chunk["system_fingerprint"].is_string()) prompt.system_fingerprint = chunk["system_fingerprint"];
      prompt.prompt_tokens = chunk.at("prompt_tokens");
      prompt.prompt_cache_hit_tokens = chunk.at("prompt_cache_hit_tokens");
      take(processor.ready(prompt));
    } else if (kind == "text") {
      take(processor.text(chunk.at("content").get<std::string>(), chunk.at("content_tokens")));
    } else if (kind == "token_text") {
      TokenPieceDecoder decoder(v41_tokenizer());
      for (const TokenId id : v41_tokenizer().encode(chunk.at("text").get<std::string>()))
        if (auto piece = decoder.push(id)) take(processor.text(piece->text, piece->tokens));
    } else if (kind == "finish") {
      const std::string reason = chunk.at("finish_reason");
      take(processor.finish(reason == "length"         ? BackendFinish::length
                            : reason == "content_filter" ? BackendFinish::content_filter
                                                         : BackendFinish::stop));
    } else {
      ADD_FAILURE() << "unknown chunk kind " << kind;
    }
  }
  take(processor.end_of_stream());
  return events;
}

class OutputVectorTest : public ::testing::TestWithParam<Vector> {};

TEST_P(OutputVectorTest, ReproducesGolden) {
  const WireJson& vector = GetParam().data;
  const std::string protocol = vector.at("protocol");
  const std::string op = vector.at("op");
  const RequestView request = view_request(vector.at("request"), protocol);
  const std::vector<StreamEvent> events = run_chunks(vector.at("chunks"), request.parsing);

  WireJson actual = WireJson::array();
  if (protocol == "chat_completions") {
    ChatCompletionsFormat format{"mock-id", "deepseek-flash", 1700000000, request.thinking,
                                 /*include_usage=*/true, /*reasoning_tokens=*/false};
    if (op == "stream") {
      ChatCompletionsChunkWriter writer(format);
      for (const StreamEvent& event : events)
        for (WireJson& chunk : writer.write(event)) actual.push_back(std::move(chunk));
    } else {
      CollectedOutput output;
      for (const StreamEvent& event : events) output.add(event);
      actual = chat_completion_body(format, output);
    }
  } else if (protocol == "messages") {
    MessagesFormat format{"mock-id", "deepseek-flash"};
    if (op == "stream") {
      MessagesEventWriter writer(format);
      for (const StreamEvent& event : events)
        for (MessagesEvent& sse : writer.write(event)) {
          EXPECT_EQ(sse.type, sse.data.at("type"));
          actual.push_back(std::move(sse.data));
        }
    } else {
      CollectedOutput output;
      for (const StreamEvent& event : events) output.add(event);
      actual = messages_body(format, output);
    }
  } else {
    ASSERT_EQ(protocol, "responses");
    ASSERT_EQ(op, "complete");
    CollectedOutput output;
    for (const StreamEvent& event : events) output.add(event);
    actual = responses_body({"mock-id", "deepseek-flash", 1700000000, 1700000001,
                             /*reasoning_tokens=*/false},
                            output);
  }
  const WireJson& expected =
      op == "stream" ? vector.at("expected_events") : vector.at("expected_response");
  EXPECT_EQ(difference(actual, expected, GetParam().name), "");
}

INSTANTIATE_TEST_SUITE_P(Conformance, OutputVectorTest, ::testing::ValuesIn(load_vectors()),
                         [](const ::testing::TestParamInfo<Vector>& param_info) { return param_info.param.name; });

TEST(OutputVectorFile, HoldsEveryVector) { EXPECT_EQ(load_vectors().size(), 19u); }

}  // namespace
}  // namespace deepinfer::api

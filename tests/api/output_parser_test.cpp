#include "api/output_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/output_processor.h"

namespace deepinfer::api {
namespace {

using Kind = OutputEvent::Kind;

// The answer as the client would assemble it.
struct Assembled {
  std::string reasoning;
  std::string content;
  std::vector<std::string> tool_names;
  std::vector<std::string> tool_arguments;
  bool operator==(const Assembled&) const = default;
};

void assemble(const std::vector<OutputEvent>& events, Assembled& out) {
  for (const OutputEvent& event : events) {
    switch (event.kind) {
      case Kind::reasoning_delta: out.reasoning += event.text; break;
      case Kind::content_delta: out.content += event.text; break;
      case Kind::tool_call_start:
        ASSERT_EQ(event.tool_index, static_cast<int>(out.tool_names.size()));
        out.tool_names.push_back(event.text);
        out.tool_arguments.emplace_back();
        break;
      case Kind::tool_call_arguments_delta:
        ASSERT_GE(event.tool_index, 0);
        ASSERT_LT(event.tool_index, static_cast<int>(out.tool_arguments.size()));
        out.tool_arguments[static_cast<std::size_t>(event.tool_index)] += event.text;
        break;
    }
  }
}

Assembled parse_pieces(const OutputParsingOptions& options, const std::vector<std::string>& pieces) {
  OutputParser parser(options);
  Assembled out;
  for (const std::string& piece : pieces) assemble(parser.feed(piece), out);
  assemble(parser.finish(), out);
  return out;
}

Assembled parse_whole(const OutputParsingOptions& options, const std::string& text) {
  return parse_pieces(options, {text});
}

std::vector<std::string> one_byte_pieces(const std::string& text) {
  std::vector<std::string> pieces;
  for (const char c : text) pieces.emplace_back(1, c);
  return pieces;
}

const std::string kWeatherCall =
    "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n"
    "<｜DSML｜ parameter name=\"location\" string=\"true\">Pa\"ris\\ \n</｜DSML｜ parameter>\n"
    "<｜DSML｜ parameter name=\"days\" string=\"false\">[1, {\"a\": 2}]</｜DSML｜ parameter>\n"
    "</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"noop\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";

OutputParsingOptions tools_options(bool thinking) {
  OutputParsingOptions options;
  options.parse_tool_calls = true;
  options.thinking = thinking;
  return options;
}

TEST(OutputParser, ThinkingSplitsReasoningFromContentAndDropsNewlinesAroundTheMarker) {
  OutputParsingOptions options;
  options.thinking = true;
  const Assembled out = parse_whole(options, "\n\nStep one.\n\n</think>\n\nAnswer.\n");
  EXPECT_EQ(out.reasoning, "Step one.");
  EXPECT_EQ(out.content, "Answer.\n");
}

TEST(OutputParser, WithoutThinkingAStrayEndOfThinkingIsDropped) {
  const Assembled out = parse_whole({}, "a</think>b");
  EXPECT_EQ(out.reasoning, "");
  EXPECT_EQ(out.content, "ab");
}

TEST(OutputParser, ToolCallArgumentsBecomeJson) {
  const Assembled out = parse_whole(tools_options(false), "Let me check.\n\n" + kWeatherCall + "tail");
  EXPECT_EQ(out.content, "Let me check.");
  ASSERT_EQ(out.tool_names, (std::vector<std::string>{"get_weather", "noop"}));
  EXPECT_EQ(out.tool_arguments[0], "{\"location\": \"Pa\\\"ris\\\\ \\n\", \"days\": [1, {\"a\": 2}]}");
  EXPECT_EQ(out.tool_arguments[1], "{}");
}

TEST(OutputParser, ToolCallMayStartStraightFromReasoning) {
  const Assembled out = parse_whole(tools_options(true), "think\n" + kWeatherCall);
  EXPECT_EQ(out.reasoning, "think");
  EXPECT_EQ(out.content, "");
  EXPECT_EQ(out.tool_names.size(), 2u);
}

TEST(OutputParser, V4TagNamesParseToo) {
  const std::string v4 =
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"x\" "
      "string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>after";
  const Assembled out = parse_whole(tools_options(false), v4);
  ASSERT_EQ(out.tool_names, std::vector<std::string>{"f"});
  EXPECT_EQ(out.tool_arguments[0], "{\"x\": 1}");
  EXPECT_EQ(out.content, "");  // text after the calls block is discarded
}

TEST(OutputParser, RequiredToolChoiceStartsInsideTheCallsBlock) {
  OutputParsingOptions options = tools_options(false);
  options.start_in_tool_calls = true;
  const Assembled out = parse_whole(
      options, "<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>");
  EXPECT_EQ(out.tool_names, std::vector<std::string>{"f"});
  EXPECT_EQ(out.tool_arguments[0], "{}");
}

TEST(OutputParser, WithoutToolParsingDsmlIsContent) {
  const Assembled out = parse_whole({}, kWeatherCall);
  EXPECT_EQ(out.content, kWeatherCall);
  EXPECT_TRUE(out.tool_names.empty());
}

TEST(OutputParser, ToolArgumentsStreamedOneByteEqualWholeParse) {
  for (const bool thinking : {false, true}) {
    const std::string text = (thinking ? "hmm</think>" : "") + std::string("x\n") + kWeatherCall;
    const Assembled whole = parse_whole(tools_options(thinking), text);
    EXPECT_EQ(parse_pieces(tools_options(thinking), one_byte_pieces(text)), whole);
    ASSERT_EQ(whole.tool_arguments.size(), 2u);
  }
}

TEST(OutputParser, StringArgumentValueStreamsAsItArrives) {
  OutputParser parser(tools_options(false));
  parser.feed("<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"k\" string=\"true\">");
  const std::vector<OutputEvent> events = parser.feed("Par");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], (OutputEvent{Kind::tool_call_arguments_delta, "Par", 0}));
  // "<" may start the closing tag, so it waits.
  const std::vector<OutputEvent> rest = parser.feed("is<");
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0].text, "is");
  const std::vector<OutputEvent> close = parser.feed("/｜DSML｜ parameter>");
  ASSERT_EQ(close.size(), 1u);
  EXPECT_EQ(close[0].text, "\"");
}

// Every split of the text into two or three pieces gives the same answer, and the stop string
// never shows, however the pieces cut it.
TEST(OutputParser, StopSequenceSplitAcrossEveryBoundaryIsNeverEmitted) {
  OutputParsingOptions options;
  options.stop_sequences = {"STOP", "", "<end>"};
  const std::string text = "Answer S ST STO <en STOP ignored tail <end>";
  const Assembled whole = parse_whole(options, text);
  EXPECT_EQ(whole.content, "Answer S ST STO <en ");
  for (std::size_t i = 0; i <= text.size(); ++i) {
    for (std::size_t j = i; j <= text.size(); ++j) {
      const std::vector<std::string> pieces{text.substr(0, i), text.substr(i, j - i), text.substr(j)};
      OutputParser parser(options);
      Assembled out;
      for (const std::string& piece : pieces) {
        const std::vector<OutputEvent> events = parser.feed(piece);
        assemble(events, out);
        ASSERT_EQ(out.content.find("STOP"), std::string::npos) << i << "," << j;
        ASSERT_EQ(out.content.find('T', 16), std::string::npos) << "emitted part of the stop string";
      }
      assemble(parser.finish(), out);
      ASSERT_EQ(out, whole) << "split at " << i << "," << j;
      ASSERT_TRUE(parser.stopped());
      ASSERT_EQ(parser.matched_stop_sequence(), "STOP");
    }
  }
}

TEST(OutputParser, PartialStopStringIsHeldBackThenReleased) {
  OutputParsingOptions options;
  options.stop_sequences = {"STOP"};
  OutputParser parser(options);
  const std::vector<OutputEvent> first = parser.feed("ab ST");
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].text, "ab ");
  const std::vector<OutputEvent> second = parser.feed("AR");
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].text, "STAR");
  EXPECT_FALSE(parser.stopped());
}

TEST(OutputParser, StopStringsAreNotMatchedInReasoningOrToolCalls) {
  OutputParsingOptions options = tools_options(true);
  options.stop_sequences = {"Paris"};
  const Assembled out = parse_whole(options, "Paris?</think>" + kWeatherCall);
  EXPECT_EQ(out.reasoning, "Paris?");
  EXPECT_EQ(out.tool_names.size(), 2u);
}

TEST(OutputParser, JsonModeReplacesTextAroundJsonWithOneSpace) {
  OutputParsingOptions options;
  options.json_output = true;
  EXPECT_EQ(parse_whole(options, "Sure:\n{\"a\": [1]}").content, " {\"a\": [1]}");
  EXPECT_EQ(parse_whole(options, "x```json\n{\"a\": 1}\n```\nbye").content, " {\"a\": 1} ");
  const std::string text = "here you go ```json\n[1, 2]\n``` trailing words";
  EXPECT_EQ(parse_pieces(options, one_byte_pieces(text)), parse_whole(options, text));
}

TEST(OutputParser, TruncatedToolCallFlushesWhatArrived) {
  const Assembled out = parse_whole(
      tools_options(false),
      "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter name=\"location\" "
      "string=\"true\">Par");
  EXPECT_EQ(out.tool_arguments, std::vector<std::string>{"{\"location\": \"Par"});
}

TEST(OutputProcessor, CountsReasoningTokensByThePieceTheyStartIn) {
  OutputParsingOptions options;
  options.thinking = true;
  OutputProcessor processor(options);
  processor.ready({"fp", 10, 4});
  processor.text("Let", 1);
  processor.text(" me", 1);
  processor.text("</th", 1);  // a marker split over pieces still belongs to the reasoning
  processor.text("ink>", 1);
  processor.text("Hi", 1);
  processor.text(" there", 2);
  const std::vector<StreamEvent> events = processor.finish(BackendFinish::stop);
  const StreamFinish& finish = std::get<StreamFinish>(events.back());
  EXPECT_EQ(finish.completion.completion_tokens, 7);
  EXPECT_EQ(finish.completion.reasoning_tokens, 4);
  EXPECT_EQ(finish.reason, FinishReason::stop);
  EXPECT_EQ(finish.prompt.prompt_cache_hit_tokens, 4);
}

TEST(OutputProcessor, StopStringEndsTheAnswerAndLaterTextIsIgnored) {
  OutputParsingOptions options;
  options.stop_sequences = {"END"};
  OutputProcessor processor(options);
  processor.text("a E", 2);
  const std::vector<StreamEvent> events = processor.text("ND b", 3);
  ASSERT_TRUE(processor.done());
  const StreamFinish& finish = std::get<StreamFinish>(events.back());
  EXPECT_EQ(finish.reason, FinishReason::stop_sequence);
  EXPECT_EQ(finish.stop_sequence, "END");
  EXPECT_EQ(finish.completion.completion_tokens, 5);
  EXPECT_TRUE(processor.text("more", 1).empty());
  EXPECT_TRUE(processor.finish(BackendFinish::stop).empty());
}

TEST(OutputProcessor, FinishReasonResolution) {
  auto reason = [](OutputParsingOptions options, const std::string& text, BackendFinish backend) {
    OutputProcessor processor(std::move(options));
    processor.text(text, 1);
    return std::get<StreamFinish>(processor.finish(backend).back()).reason;
  };
  EXPECT_EQ(reason({}, "x", BackendFinish::stop), FinishReason::stop);
  EXPECT_EQ(reason({}, "x", BackendFinish::length), FinishReason::length);
  EXPECT_EQ(reason({}, "x", BackendFinish::content_filter), FinishReason::content_filter);
  EXPECT_EQ(reason(tools_options(false), kWeatherCall, BackendFinish::stop), FinishReason::tool_calls);
  EXPECT_EQ(reason(tools_options(false), kWeatherCall, BackendFinish::length), FinishReason::length);
  OutputProcessor eof({});
  EXPECT_EQ(std::get<StreamFinish>(eof.end_of_stream().back()).reason, FinishReason::end_of_stream);
}

}  // namespace
}  // namespace deepinfer::api

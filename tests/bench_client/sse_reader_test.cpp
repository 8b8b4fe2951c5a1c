#include "cli/bench_sse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deepinfer::cli::bench {
namespace {

std::vector<std::string> data_of(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& event : events) out.push_back(event.data);
  return out;
}

// A stream with everything a server may send: comments, CRLF and LF, an event name, a two-line
// data field, a field without the space after the colon, and the [DONE] sentinel.
const std::string kStream =
    ": keep-alive\r\n"
    "data: {\"a\":1}\r\n\r\n"
    "event: usage\n"
    "data: first line\n"
    "data: second line\n\n"
    "data:{\"b\":2}\n"
    ": comment between fields\n"
    "id: 7\n\n"
    "data: [DONE]\n\n";

TEST(SseReader, ParsesEventsCommentsAndLineEndings) {
  SseReader reader;
  const auto events = reader.feed(kStream);
  EXPECT_EQ(data_of(events),
            (std::vector<std::string>{"{\"a\":1}", "first line\nsecond line", "{\"b\":2}", "[DONE]"}));
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].event, "usage");
  EXPECT_EQ(events[0].event, "");
  EXPECT_TRUE(is_done_marker(events[3].data));
  EXPECT_FALSE(is_done_marker(events[0].data));
}

TEST(SseReader, SplitAnywhereGivesTheSameEvents) {
  const auto whole = data_of(SseReader().feed(kStream));
  for (std::size_t cut = 0; cut <= kStream.size(); ++cut) {
    for (std::size_t second_cut = cut; second_cut <= kStream.size(); second_cut += 7) {
      SseReader reader;
      auto events = reader.feed(std::string_view(kStream).substr(0, cut));
      for (auto& e : reader.feed(std::string_view(kStream).substr(cut, second_cut - cut))) events.push_back(e);
      for (auto& e : reader.feed(std::string_view(kStream).substr(second_cut))) events.push_back(e);
      ASSERT_EQ(data_of(events), whole) << "cuts at " << cut << " and " << second_cut;
    }
  }
  SseReader byte_by_byte;
  std::vector<SseEvent> events;
  for (char c : kStream)
    for (auto& e : byte_by_byte.feed(std::string_view(&c, 1))) events.push_back(e);
  EXPECT_EQ(data_of(events), whole);
}

TEST(SseReader, CrThenLfInTheNextPieceIsOneLineEnd) {
  // Were the LF taken as a second, blank line, "a" would be sent on its own before "b" arrived.
  SseReader reader;
  EXPECT_TRUE(reader.feed("data: a\r").empty());
  EXPECT_TRUE(reader.feed("\ndata: b\r").empty());
  EXPECT_EQ(data_of(reader.feed("\n\r\n")), (std::vector<std::string>{"a\nb"}));
}

TEST(SseReader, BareCrEndsLinesAndUnfinishedEventsWait) {
  SseReader reader;
  EXPECT_EQ(data_of(reader.feed("data: x\r\rdata: y\r")), (std::vector<std::string>{"x"}));
  EXPECT_TRUE(reader.feed("data: z").empty());  // no blank line yet: the event is not complete
  EXPECT_EQ(data_of(reader.feed("\n\n")), (std::vector<std::string>{"y\nz"}));
}

TEST(SseReader, BlankLinesWithoutDataSendNothing) {
  SseReader reader;
  EXPECT_TRUE(reader.feed("\n\n: only a comment\n\nevent: ping\n\n").empty());
  // The event name of a data-less event does not leak into the next one.
  const auto events = reader.feed("data: d\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event, "");
  EXPECT_EQ(events[0].data, "d");
}

TEST(SseReader, EmptyDataFieldIsAnEventWithEmptyData) {
  SseReader reader;
  const auto events = reader.feed("data\n\ndata:\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].data, "");
  EXPECT_EQ(events[1].data, "");
}

}  // namespace
}  // namespace deepinfer::cli::bench

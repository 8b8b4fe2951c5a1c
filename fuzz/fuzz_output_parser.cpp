// Feeds arbitrary text to the output parser twice: whole, and cut into random pieces. The
// assembled reasoning, content and tool calls must agree (the parser holds back partial markers
// and stop strings, so the cut must not matter), tool-call events must reference calls that
// started, and nothing may crash. Byte 0 picks the options, byte 1 seeds the cut points.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "api/output_parser.h"

namespace {

using deepinfer::api::OutputEvent;

struct Assembled {
  std::string reasoning, content;
  std::vector<std::string> names, arguments;
  bool operator==(const Assembled&) const = default;
};

void assemble(const std::vector<OutputEvent>& events, Assembled& out) {
  for (const OutputEvent& event : events) {
    switch (event.kind) {
      case OutputEvent::Kind::reasoning_delta: out.reasoning += event.text; break;
      case OutputEvent::Kind::content_delta: out.content += event.text; break;
      case OutputEvent::Kind::tool_call_start:
        if (event.tool_index != static_cast<int>(out.names.size())) std::abort();
        out.names.push_back(event.text);
        out.arguments.emplace_back();
        break;
      case OutputEvent::Kind::tool_call_arguments_delta:
        if (event.tool_index < 0 || event.tool_index >= static_cast<int>(out.arguments.size()))
          std::abort();
        out.arguments[static_cast<std::size_t>(event.tool_index)] += event.text;
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const uint8_t flags = data[0];
  uint32_t seed = data[1];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  deepinfer::api::OutputParsingOptions options;
  options.thinking = flags & 1;
  options.parse_tool_calls = flags & 2;
  options.start_in_tool_calls = (flags & 6) == 6;
  options.json_output = flags & 8;
  if (flags & 16) options.stop_sequences = {"STOP", "</", "\n\n", ""};

  deepinfer::api::OutputParser whole_parser(options);
  Assembled whole;
  assemble(whole_parser.feed(text), whole);
  assemble(whole_parser.finish(), whole);

  deepinfer::api::OutputParser piece_parser(options);
  Assembled pieces;
  std::size_t at = 0;
  while (at < text.size()) {
    seed = seed * 1103515245u + 12345u;
    const std::size_t length = (seed >> 16) % 9;  // 0..8 bytes, empty pieces included
    const std::string_view piece = text.substr(at, length);
    assemble(piece_parser.feed(piece), pieces);
    at += piece.size();
  }
  assemble(piece_parser.finish(), pieces);

  if (!(whole == pieces)) std::abort();
  if (whole_parser.stopped() != piece_parser.stopped()) std::abort();
  if (whole_parser.matched_stop_sequence() != piece_parser.matched_stop_sequence()) std::abort();
  return 0;
}

// Raw bytes off a connection -> the server's HTTP/1.1 request parser (server/http_parser.h, the
// code every connection runs), fed whole and again cut at a point the input chooses, as a socket
// delivers it; then, for a complete request, its body through the budgeted JSON parser the
// handlers use (server/json_body.h). Checked: both cuts reach the same outcome (both refuse it,
// though a malformed start line may be refused as malformed at once or as cut short at the end;
// or both read the same method, target, headers and body); a complete request respects every
// limit; nothing escapes; and any sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http_parser.h"
#include "server/json_body.h"

namespace {

using deepinfer::server::HttpLimits;
using deepinfer::server::RequestParser;

// Small limits, so the fuzzer reaches them.
HttpLimits limits() {
  HttpLimits out;
  out.max_header_bytes = 2048;
  out.max_header_count = 16;
  out.max_body_bytes = 4096;
  return out;
}

// Feeds `input` in pieces cut at `cut`, keeping unused bytes as a connection's buffer does.
void parse(RequestParser& parser, std::string_view input, std::size_t cut) {
  std::string buffer;
  std::size_t at = 0;
  while (at < input.size() && parser.error_status() == 0 && !parser.done()) {
    const std::size_t take = std::min(cut == 0 ? input.size() : cut, input.size() - at);
    buffer.append(input.substr(at, take));
    at += take;
    buffer.erase(0, parser.feed(buffer));
    if (buffer.size() > limits().max_header_bytes + 4 * cut + 8192) std::abort();  // the head is bounded
  }
  if (at >= input.size() && parser.error_status() == 0 && !parser.done()) parser.feed_eof();
}

void check_same(RequestParser& a, RequestParser& b) {
  if ((a.error_status() != 0) != (b.error_status() != 0) || a.done() != b.done()) std::abort();
  if (!a.done()) return;
  const auto& x = a.request();
  const auto& y = b.request();
  if (x.method != y.method || x.target != y.target || x.path != y.path || x.version != y.version ||
      x.headers != y.headers || x.body != y.body)
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte picks where the second feeding cuts the rest.
  const std::size_t cut = 1 + data[0] % 61;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const HttpLimits bounds = limits();
  RequestParser whole(bounds);
  parse(whole, input, 0);
  RequestParser pieces(bounds);
  parse(pieces, input, cut);
  check_same(whole, pieces);
  if (whole.error_status() != 0) {
    const int status = whole.error_status();
    if (status != 400 && status != 413 && status != 431 && status != 501 && status != 505) std::abort();
    return 0;
  }
  if (!whole.done()) return 0;
  const auto& request = whole.request();
  if (request.body.size() > bounds.max_body_bytes || request.headers.size() > bounds.max_header_count) std::abort();
  deepinfer::server::JsonBudget budget;
  budget.max_keys = 64;
  budget.max_values = 256;
  budget.max_depth = 16;
  const auto parsed = deepinfer::server::parse_json_with_budget(request.body, budget);
  (void)parsed;
  return 0;
}

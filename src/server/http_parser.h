#pragma once
// Incremental HTTP/1.1 request parsing with every limit enforced while the bytes arrive, before
// memory is spent: header bytes and header count (431), the body's length whether announced by
// Content-Length or chunked (413, the body buffer grows only with bytes actually received), and
// malformed framing (400: bad or conflicting Content-Length, bad chunk sizes, bad request line;
// 501: a transfer coding other than chunked). Boost.Beast's basic_parser does the tokenising
// (inside http_parser.cpp only, so this header stays cheap to include).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_message.h"

namespace deepinfer::server {

struct HttpLimits {
  std::size_t max_header_bytes = 64 << 10;    // request line + every field, with their CRLFs
  std::size_t max_header_count = 128;         // fields
  std::uint64_t max_body_bytes = 8 << 20;     // decoded body bytes (Content-Length or chunked)
};

class RequestParser {
 public:
  explicit RequestParser(const HttpLimits& limits);
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;

  // Parses what it can of `data` and returns how many bytes it used; the caller keeps the rest
  // and calls again with it and more (an incomplete head is used only once it is complete, so
  // the caller's buffer holds at most max_header_bytes of head). Does nothing after an error
  // or once the request is complete.
  std::size_t feed(std::string_view data);
  // The peer closed its side: a request cut short is an error (400).
  void feed_eof();

  bool header_done() const;
  bool done() const;
  // 0 while the request is fine, else the status to refuse it with (400, 413, 431, 501) and why.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

  // The request (complete once done(); method, target, path, version and headers once
  // header_done()).
  HttpRequest& request() { return request_; }
  // The length the head announced (Content-Length), if any.
  std::optional<std::uint64_t> content_length() const;
  bool chunked() const;
  // Whether the connection may carry another request after this one (HTTP/1.1 without
  // "Connection: close", HTTP/1.0 with "keep-alive").
  bool keep_alive() const;
  // The head asked for "Expect: 100-continue".
  bool expects_continue() const;

 private:
  struct Impl;
  friend struct Impl;
  void fail(int status, std::string message);

  std::unique_ptr<Impl> impl_;
  HttpRequest request_;
  HttpLimits limits_;
  int error_status_ = 0;
  std::string error_message_;
};

// Whether `method` is one of the methods HTTP defines (RFC 9110 §9 and PATCH): the server
// answers 405 for those it does not serve on a path, 501 for any other token.
bool is_standard_method(std::string_view method);

}  // namespace deepinfer::server

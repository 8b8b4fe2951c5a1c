#include "server/http_parser.h"

#include <algorithm>
#include <array>
#include <cstring>

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

namespace deepinfer::server {

namespace http = boost::beast::http;
using boost::beast::error_code;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

std::string HttpRequest::get_header_value(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (iequals(key, name)) return value;
  return {};
}

bool HttpRequest::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const auto& field) { return iequals(field.first, name); });
}

void HttpResponse::set_header(std::string name, std::string value) {
  for (auto& field : headers)
    if (iequals(field.first, name)) {
      field.second = std::move(value);
      return;
    }
  headers.emplace_back(std::move(name), std::move(value));
}

void HttpResponse::set_content(std::string content, std::string type) {
  body = std::move(content);
  content_type = std::move(type);
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

bool is_standard_method(std::string_view method) {
  static constexpr std::array<std::string_view, 9> kMethods = {"GET",    "HEAD",    "POST",  "PUT",  "DELETE",
                                                              "CONNECT", "OPTIONS", "TRACE", "PATCH"};
  return std::find(kMethods.begin(), kMethods.end(), method) != kMethods.end();
}

namespace {

// Whether `data` starts with a well-formed request line of an HTTP version other than 1.x
// ("GET / HTTP/2.0"): Beast refuses every version but 1.x as malformed, which it is not.
bool is_other_http_version(std::string_view data) {
  const std::size_t end = data.find("\r\n");
  if (end == std::string_view::npos) return false;
  const std::string_view line = data.substr(0, end);
  const std::size_t space = line.rfind(' ');
  if (space == std::string_view::npos || line.find(' ') == space) return false;
  const std::string_view version = line.substr(space + 1);
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  return version.size() == 8 && version.substr(0, 5) == "HTTP/" && digit(version[5]) && version[6] == '.' &&
         digit(version[7]) && version[5] != '1';
}

}  // namespace

// Beast's request parser, with the body kept in the request as it arrives (never reserved ahead
// of the bytes) and the header fields counted.
struct RequestParser::Impl final : http::basic_parser<true> {
  RequestParser& owner;
  std::size_t fields = 0;
  bool too_many_fields = false;
  bool has_transfer_encoding = false;
  std::string transfer_encoding;

  explicit Impl(RequestParser& parser) : owner(parser) {
    header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(owner.limits_.max_header_bytes, UINT32_MAX)));
    body_limit(owner.limits_.max_body_bytes);
    eager(true);
  }

  void on_request_impl(http::verb, boost::beast::string_view method, boost::beast::string_view target, int version,
                       error_code&) override {
    HttpRequest& request = owner.request_;
    request.method.assign(method.data(), method.size());
    request.target.assign(target.data(), target.size());
    const std::size_t query = request.target.find('?');
    request.path = request.target.substr(0, query);
    request.version = version;
  }

  void on_response_impl(int, boost::beast::string_view, int, error_code&) override {}

  void on_field_impl(http::field name, boost::beast::string_view name_string, boost::beast::string_view value,
                     error_code& ec) override {
    if (++fields > owner.limits_.max_header_count) {
      too_many_fields = true;
      ec = http::error::header_limit;
      return;
    }
    if (name == http::field::transfer_encoding) {
      has_transfer_encoding = true;
      if (!transfer_encoding.empty()) transfer_encoding += ",";
      transfer_encoding.append(value.data(), value.size());
    }
    owner.request_.headers.emplace_back(std::string(name_string.data(), name_string.size()),
                                        std::string(value.data(), value.size()));
  }

  void on_header_impl(error_code& ec) override {
    // RFC 9112 §6.3: a request whose last transfer coding is not chunked has no determinable
    // length (400); chunked behind another coding is one this server does not implement (501).
    if (!has_transfer_encoding) return;
    if (!chunked()) {
      owner.fail(400, "Transfer-Encoding without chunked as the final coding");
      ec = http::error::bad_transfer_encoding;
      return;
    }
    std::string codings;
    for (char c : transfer_encoding)
      if (c != ' ' && c != '\t') codings.push_back(c);
    if (!iequals(codings, "chunked")) {
      owner.fail(501, "Transfer-Encoding other than chunked is not implemented");
      ec = http::error::bad_transfer_encoding;
    }
  }

  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}

  std::size_t on_body_impl(boost::beast::string_view body, error_code&) override {
    owner.request_.body.append(body.data(), body.size());
    return body.size();
  }

  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view, error_code&) override {}

  std::size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view body, error_code&) override {
    owner.request_.body.append(body.data(), body.size());
    return body.size();
  }

  void on_finish_impl(error_code&) override {}
};

RequestParser::RequestParser(const HttpLimits& limits) : limits_(limits) { impl_ = std::make_unique<Impl>(*this); }

RequestParser::~RequestParser() = default;

void RequestParser::fail(int status, std::string message) {
  if (error_status_ != 0) return;
  error_status_ = status;
  error_message_ = std::move(message);
}

std::size_t RequestParser::feed(std::string_view data) {
  std::size_t used = 0;
  while (error_status_ == 0 && !impl_->is_done() && used < data.size()) {
    // Beast asserts (debug builds) that a chunk header it is to re-read after its final chunk
    // comes with at least 5 bytes; what is left of any valid chunked body is at least that long
    // ("0\r\n\r\n"), so fewer wait for more.
    if (impl_->is_header_done() && impl_->chunked() && data.size() - used < 5) break;
    error_code ec;
    const std::size_t n = impl_->put(boost::asio::const_buffer(data.data() + used, data.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) break;
    if (ec) {
      if (ec == http::error::header_limit) {
        fail(431, impl_->too_many_fields ? "The request has more than " + std::to_string(limits_.max_header_count) +
                                               " header fields"
                                         : "The request's header is larger than " +
                                               std::to_string(limits_.max_header_bytes) + " bytes");
      } else if (ec == http::error::body_limit) {
        fail(413, "The request body is larger than the server's limit");
      } else if (ec == http::error::bad_content_length || ec == http::error::multiple_content_length) {
        fail(400, "Malformed or conflicting Content-Length");
      } else if (ec == http::error::bad_version && is_other_http_version(data.substr(used))) {
        fail(505, "Only HTTP/1.0 and HTTP/1.1 are served");
      } else {
        fail(400, "Malformed HTTP request: " + ec.message());
      }
      break;
    }
    if (n == 0) break;
  }
  return used;
}

void RequestParser::feed_eof() {
  if (error_status_ != 0 || impl_->is_done()) return;
  if (!impl_->got_some()) {  // nothing at all (Beast's put_eof requires some)
    fail(400, "The connection closed before a request");
    return;
  }
  error_code ec;
  impl_->put_eof(ec);
  if (ec) fail(400, "The request ended before it was complete");
}

bool RequestParser::header_done() const { return error_status_ == 0 && impl_->is_header_done(); }
bool RequestParser::done() const { return error_status_ == 0 && impl_->is_done(); }

std::optional<std::uint64_t> RequestParser::content_length() const {
  if (!impl_->is_header_done()) return std::nullopt;
  const auto length = impl_->content_length();
  return length ? std::optional<std::uint64_t>(*length) : std::nullopt;
}

bool RequestParser::chunked() const { return impl_->is_header_done() && impl_->chunked(); }

bool RequestParser::keep_alive() const { return impl_->is_header_done() && impl_->keep_alive(); }

bool RequestParser::expects_continue() const {
  if (!impl_->is_header_done()) return false;
  for (const auto& [name, value] : request_.headers)
    if (iequals(name, "Expect") && iequals(value, "100-continue")) return true;
  return false;
}

}  // namespace deepinfer::server

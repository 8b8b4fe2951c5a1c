#pragma once
// Raw TCP clients for the tests that behave as no HTTP library would let a client behave:
// trickling bytes, resetting, half-closing, sending bodies without end.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace deepinfer::server::testing {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Raises this process's open-file limit to its hard limit (thousands of sockets).
inline void raise_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// The process's resident memory in bytes (VmRSS).
inline long long resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

// A blocking connection to 127.0.0.1:port (-1 if it failed).
inline int connect_to(int port, bool nonblocking = false) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 && !nonblocking) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// Closes with a reset (SO_LINGER 0) instead of a FIN.
inline void reset_close(int fd) {
  linger option{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &option, sizeof(option));
  ::close(fd);
}

// Whether fd has something to read (or EOF / an error) within `timeout`.
inline bool readable_within(int fd, std::chrono::milliseconds timeout) {
  pollfd watched{fd, POLLIN, 0};
  return ::poll(&watched, 1, static_cast<int>(timeout.count())) > 0;
}

// Reads until EOF, an error, `until` found in what was read, or `timeout`; returns what came.
inline std::string read_for(int fd, std::chrono::milliseconds timeout, const std::string& until = "") {
  const auto deadline = Clock::now() + timeout;
  std::string out;
  char buffer[16384];
  while (Clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!readable_within(fd, std::max(left, std::chrono::milliseconds(1)))) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
    if (!until.empty() && out.find(until) != std::string::npos) break;
  }
  return out;
}

// Whether the peer has closed fd (EOF or reset) within `timeout`.
inline bool closed_within(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  char buffer[4096];
  while (Clock::now() < deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!readable_within(fd, std::max(left, std::chrono::milliseconds(1)))) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return true;
  }
  return false;
}

// The status code of the last HTTP response head in `text` that is not an interim 1xx, or 0.
inline int final_status(const std::string& text) {
  int status = 0;
  for (std::size_t at = text.find("HTTP/1.1 "); at != std::string::npos; at = text.find("HTTP/1.1 ", at + 1)) {
    const int code = std::atoi(text.c_str() + at + 9);
    if (code >= 200) return code;
    status = code;
  }
  return status >= 200 ? status : 0;
}

// A whole request: method, path, extra header lines ("Name: value\r\n" each) and body.
inline std::string http_request(const std::string& method, const std::string& path, const std::string& body = "",
                                const std::string& headers = "") {
  std::string out = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers;
  if (!body.empty() || method == "POST") out += "Content-Type: application/json\r\nContent-Length: " +
                                               std::to_string(body.size()) + "\r\n";
  return out + "\r\n" + body;
}

// Whether `text` holds a whole final response: its head (after any interim 1xx ones) and a body
// of its Content-Length, or a chunked body to its last chunk. (A response without either ends
// with the connection.)
inline bool response_complete(const std::string& text) {
  std::size_t head_start = 0;
  for (;;) {
    const std::size_t head_end = text.find("\r\n\r\n", head_start);
    if (head_end == std::string::npos) return false;
    const std::string head = text.substr(head_start, head_end - head_start);
    if (head.rfind("HTTP/1.1 1", 0) == 0) {  // interim
      head_start = head_end + 4;
      continue;
    }
    const std::size_t length_at = head.find("Content-Length: ");
    if (length_at != std::string::npos)
      return text.size() >= head_end + 4 + std::stoull(head.substr(length_at + 16));
    if (head.find("Transfer-Encoding: chunked") != std::string::npos)
      return text.find("\r\n0\r\n\r\n", head_end) != std::string::npos;
    return false;
  }
}

// Reads one whole response (or until EOF or `timeout`).
inline std::string read_response(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string out;
  char buffer[16384];
  while (Clock::now() < deadline && !response_complete(out)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!readable_within(fd, std::max(left, std::chrono::milliseconds(1)))) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
  }
  return out;
}

// One request on a fresh connection; its whole answer.
inline std::string exchange(int port, const std::string& request, std::chrono::milliseconds timeout) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, request);
  std::string out = read_response(fd, timeout);
  ::close(fd);
  return out;
}

}  // namespace deepinfer::server::testing

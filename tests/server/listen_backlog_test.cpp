// A burst of connections must not overflow the listen backlog (the server listens with
// SOMAXCONN; cpp-httplib's was 5): the kernel would drop the extra SYNs and those clients would
// wait a second or more to retry.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

int connect_nonblocking(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  return fd;
}

// How many of `fds` finished the TCP handshake before `deadline`.
int connected_by(const std::vector<int>& fds, std::chrono::steady_clock::time_point deadline) {
  std::vector<bool> done(fds.size(), false);
  int connected = 0;
  while (connected < static_cast<int>(fds.size()) && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> waiting;
    std::vector<std::size_t> index;
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (!done[i]) {
        waiting.push_back({fds[i], POLLOUT, 0});
        index.push_back(i);
      }
    ::poll(waiting.data(), waiting.size(), 10);
    for (std::size_t k = 0; k < waiting.size(); ++k) {
      if (!(waiting[k].revents & (POLLOUT | POLLERR | POLLHUP))) continue;
      int error = 0;
      socklen_t length = sizeof(error);
      ::getsockopt(waiting[k].fd, SOL_SOCKET, SO_ERROR, &error, &length);
      done[index[k]] = true;
      if (error == 0) ++connected;
    }
  }
  return connected;
}

std::string read_all(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string out;
  char buffer[4096];
  for (ssize_t got; (got = ::recv(fd, buffer, sizeof(buffer), 0)) > 0;) out.append(buffer, static_cast<std::size_t>(got));
  return out;
}

TEST(ListenBacklog, SixtyFourConnectionsAtOnceAreAllAcceptedWithinHalfASecond) {
  Server server(test_options());
  const int port = server.bind();
  // Nothing accepts yet (serve() has not started), so every handshake that completes sits in the
  // accept queue: with a backlog of 5 only 6 would.
  std::vector<int> fds;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 64; ++i) fds.push_back(connect_nonblocking(port));
  EXPECT_EQ(connected_by(fds, start + std::chrono::milliseconds(500)), 64);

  std::thread serving([&] { server.serve(); });
  const std::string request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  int answered = 0;
  for (int fd : fds) {
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()) &&
        read_all(fd).rfind("HTTP/1.1 200", 0) == 0)
      ++answered;
    ::close(fd);
  }
  EXPECT_EQ(answered, 64);
  server.shutdown();
  serving.join();
}

}  // namespace
}  // namespace deepinfer::server::testing

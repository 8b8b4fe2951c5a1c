#include "server/listen_backlog.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>

// Why: Debian's cpp-httplib 0.11 is a compiled library built with CPPHTTPLIB_LISTEN_BACKLOG = 5
// and keeps its listening socket private. With a backlog of 5, a burst of connections (hundreds
// of streaming clients starting at once) overflows the accept queue, the kernel drops the extra
// SYNs and those clients wait for TCP's retransmit timer (1 s, then 3 s, ...). The socket is found
// through /proc/self/fd, and listen() on a socket that already listens only changes its backlog.
namespace deepinfer::server {
namespace {

int bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return -1;
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return -1;
}

bool is_listening(int fd) {
  int accepting = 0;
  socklen_t length = sizeof(accepting);
  return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) == 0 && accepting != 0;
}

}  // namespace

bool widen_listen_backlog(int port) {
  std::error_code error;
  bool widened = false;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    const std::string name = entry.path().filename().string();
    char* end = nullptr;
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0') continue;
    struct stat info {};
    if (::fstat(static_cast<int>(fd), &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    if (bound_port(static_cast<int>(fd)) != port || !is_listening(static_cast<int>(fd))) continue;
    widened = ::listen(static_cast<int>(fd), SOMAXCONN) == 0 || widened;
  }
  return widened;
}

}  // namespace deepinfer::server

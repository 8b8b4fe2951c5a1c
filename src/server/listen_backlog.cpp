#include "server/listen_backlog.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "server/process_sockets.h"

// Why: Debian's cpp-httplib 0.11 is a compiled library built with CPPHTTPLIB_LISTEN_BACKLOG = 5
// and keeps its listening socket private. With a backlog of 5, a burst of connections (hundreds
// of streaming clients starting at once) overflows the accept queue, the kernel drops the extra
// SYNs and those clients wait for TCP's retransmit timer (1 s, then 3 s, ...). The socket is found
// through /proc/self/fd (process_sockets.h), and listen() on a socket that already listens only
// changes its backlog.
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
  bool widened = false;
  find_socket([&](int fd) {
    if (bound_port(fd) == port && is_listening(fd)) widened = ::listen(fd, SOMAXCONN) == 0 || widened;
    return false;  // every listening socket on the port (IPv4 and IPv6)
  });
  return widened;
}

}  // namespace deepinfer::server

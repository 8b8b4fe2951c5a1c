#include "server/client_connection.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "server/process_sockets.h"

namespace deepinfer::server {
namespace {

struct Endpoint {
  std::string host;  // numeric, as httplib writes remote_addr
  int port = -1;
};

std::optional<Endpoint> endpoint_of(const sockaddr_storage& address, socklen_t length) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return std::nullopt;
  return Endpoint{host, std::atoi(port)};
}

std::optional<Endpoint> local_endpoint(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return std::nullopt;
  return endpoint_of(address, length);
}

std::optional<Endpoint> peer_endpoint(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return std::nullopt;
  return endpoint_of(address, length);
}

}  // namespace

int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port) {
  return find_socket([&](int fd) {
    const std::optional<Endpoint> peer = peer_endpoint(fd);
    if (!peer || peer->port != remote_port || peer->host != remote_addr) return false;
    const std::optional<Endpoint> local = local_endpoint(fd);
    return local && local->port == local_port;
  });
}

ClientConnection::ClientConnection(const httplib::Request& request)
    : request_(request), next_check_(std::chrono::steady_clock::now() + kCheckInterval) {}

bool ClientConnection::gone() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return false;
  next_check_ = now + kCheckInterval;
  if (!looked_up_) {
    looked_up_ = true;
    fd_ = find_connection_socket(request_.remote_addr, request_.remote_port, request_.local_port);
  }
  if (fd_ < 0) return false;
  pollfd watched{fd_, POLLRDHUP, 0};
  return ::poll(&watched, 1, 0) > 0 && (watched.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace deepinfer::server

#pragma once
// Tells a handler that is still generating a non-streaming answer that its client has gone.
#include <chrono>

#include <httplib.h>

namespace deepinfer::server {

// The status logged and counted for a request whose client left before a non-streaming answer was
// sent (nginx's 499; no client ever sees it).
inline constexpr int kClientClosedRequest = 499;

// Why: Debian's cpp-httplib 0.11 gives a handler no access to its socket and notices a departed
// client only when a write fails, which a non-streaming answer does once, at the end: a client
// that gave up would have its whole answer generated for nobody. The request's socket is found
// through /proc/self/fd by its two addresses (only once the answer has taken a while, so short
// requests never look; process_sockets.h) and polled for the peer's hang-up (POLLRDHUP: closed, or at least done
// sending, which an HTTP client waiting for its answer is only when it has left).
class ClientConnection {
 public:
  explicit ClientConnection(const httplib::Request& request);

  // At most one poll per kCheckInterval; false while the socket is not known.
  bool gone();

  static constexpr std::chrono::milliseconds kCheckInterval{100};

 private:
  const httplib::Request& request_;
  std::chrono::steady_clock::time_point next_check_;
  bool looked_up_ = false;
  int fd_ = -1;
};

// The socket of the connection from remote_addr:remote_port to local_port, or -1.
int find_connection_socket(const std::string& remote_addr, int remote_port, int local_port);

}  // namespace deepinfer::server

#pragma once
// This process's open sockets, found through /proc/self/fd. Why: Debian's cpp-httplib 0.11 keeps
// its sockets private (the listening one and each connection's), and the server needs to reach
// them twice: to widen the listen backlog and to notice a departed client.
#include <functional>

namespace deepinfer::server {

// Calls `visit` with each open socket's descriptor until it returns true; returns that
// descriptor, or -1 when none was accepted.
int find_socket(const std::function<bool(int fd)>& visit);

}  // namespace deepinfer::server

#pragma once
// Widens the accept backlog of a socket httplib already listens on.
namespace deepinfer::server {

// Finds this process's listening TCP socket bound to `port` and calls listen() on it again with
// SOMAXCONN (Linux then updates the backlog in place). Returns false when no such socket exists.
bool widen_listen_backlog(int port);

}  // namespace deepinfer::server

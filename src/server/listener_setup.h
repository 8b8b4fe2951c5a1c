#pragma once
// What the server (server.h) and the data-parallel front (data_parallel_front.h) set up alike
// around their HTTP listener: the process's open-file limit, the listener's options from the
// command line's, and the answers the HTTP layer gives by itself.
#include <cstdint>
#include <string>

#include "server/http_listener.h"
#include "server/server_options.h"

namespace deepinfer::server {

// RLIMIT_NOFILE raised to its hard limit (every connection is a descriptor); the limit in force.
int64_t raise_open_file_limit();

// options' limits, deadlines and threads, with at most `max_connections` open connections.
ListenerOptions listener_options(const ServerOptions& options, int64_t max_connections);

// The HTTP layer's own refusals (400, 408, 413, 431, 501, 503, 505) as the endpoint's error object.
void http_layer_error(const std::string& path, int status, const std::string& message, HttpResponse& response);

// --cors: Access-Control-Allow-* on every response.
void add_cors_headers(HttpResponse& response);

}  // namespace deepinfer::server

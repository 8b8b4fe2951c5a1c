#include "server/listener_setup.h"

#include <sys/resource.h>

#include <algorithm>
#include <thread>

#include "server/http_io.h"

namespace deepinfer::server {

int64_t raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? int64_t{1} << 20 : static_cast<int64_t>(limit.rlim_cur);
}

ListenerOptions listener_options(const ServerOptions& options, int64_t max_connections) {
  ListenerOptions listener;
  listener.host = options.host;
  listener.port = options.port;
  listener.max_connections = max_connections;
  listener.header_timeout = options.header_timeout;
  listener.keep_alive_timeout = options.keep_alive_timeout;
  listener.limits.max_header_bytes = static_cast<std::size_t>(std::max<int64_t>(256, options.max_header_bytes));
  listener.limits.max_header_count = static_cast<std::size_t>(std::max<int64_t>(1, options.max_header_count));
  listener.limits.max_body_bytes = static_cast<uint64_t>(std::max<int64_t>(1, options.max_body_bytes));
  listener.worker_threads = std::max(1, options.http_threads);
  listener.io_threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency() / 8, 1, 4));
  return listener;
}

void http_layer_error(const std::string& path, int status, const std::string& message, HttpResponse& response) {
  send_error(path, response,
             status >= 500 ? api::ApiError(status, message, "", "server_error", status == 503 ? "unavailable" : "")
                           : api::ApiError(status, message));
}

void add_cors_headers(HttpResponse& response) {
  response.set_header("Access-Control-Allow-Origin", "*");
  response.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  response.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
}

}  // namespace deepinfer::server

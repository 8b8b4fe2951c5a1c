#pragma once
// Filling the server's queue in a test: streaming requests that keep their place in the engine
// until the test releases them, and waiting for the engine to report what it holds.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "server_fixture.h"

namespace deepinfer::server::testing {

// A server that runs one request and queues one more: two held requests fill it.
inline ServerOptions options_for_one_running_one_waiting() {
  ServerOptions options = test_options();
  options.engine.max_running = 1;
  options.engine.max_waiting = 1;
  return options;
}

// Polls `condition` until it holds or a minute has passed; whether it held. The deadline is
// generous: sanitizer builds on a loaded CI box are slow.
template <class Condition>
bool wait_until(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Waits until one snapshot of the engine's (per-step) published stats shows `running` running
// and `waiting` waiting requests.
inline bool wait_for_requests(engine::Engine& engine, int64_t running, int64_t waiting) {
  return wait_until([&] {
    const engine::EngineStats stats = engine.stats();
    return stats.running == running && stats.waiting == waiting;
  });
}

// Posts the streaming request `body` to `path` and keeps reading its answer until `release` is
// set, so the request holds its place in the engine until then. Returns once the client gave up.
inline void post_and_hold(RunningServer& server, const std::string& path, const std::string& body,
                          const std::atomic<bool>& release) {
  httplib::Request request = json_post_request(path, body);
  request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return !release.load(); };
  auto client = server.client();
  client.send(request);
}

}  // namespace deepinfer::server::testing

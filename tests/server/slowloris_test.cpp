// Issue 19's slowloris: 2,000 connections trickle their request heads a byte at a time for 30 s
// (reconnecting whenever the server drops one, as the attack does), while a normal client's
// chat completions, /health and /metrics each answer within 1 s; the header deadline (the
// default 10 s) drops the trickling connections, and the server holds no thread for any of them.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "raw_client.h"
#include "sanitizer_scale.h"
#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

TEST(Slowloris, TwoThousandTricklingConnectionsDoNotStarveANormalClient) {
  raise_file_limit();
  const int connections = deepinfer::testing::release_or_sanitized(2000, 200);
  const auto hold = std::chrono::seconds(deepinfer::testing::release_or_sanitized(30, 6));
  ServerOptions options = test_options();
  if (deepinfer::testing::kUnderSanitizer) options.header_timeout = 2s;  // the default 10 s in release
  RunningServer server(options);
  const double header_timeout_ms = static_cast<double>(options.header_timeout.count());

  struct Trickler {
    int fd = -1;
    Clock::time_point opened;
    std::size_t sent = 0;
  };
  const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  std::atomic<bool> stop{false};
  std::atomic<int> dropped{0};
  std::atomic<int> dropped_early{0};  // before the header deadline: would mean a wrong deadline
  std::atomic<int> dropped_late{0};   // well after it
  std::atomic<int> open_now{0};
  std::thread attacker([&] {
    std::vector<Trickler> all(static_cast<std::size_t>(connections));
    auto open = [&](Trickler& t) {
      t.fd = connect_to(server.port(), /*nonblocking=*/true);
      t.opened = Clock::now();
      t.sent = 0;
    };
    for (auto& t : all) open(t);
    // Each connection sends one byte every 1-2 s: about 1,500 bytes/s from 2,000 connections.
    std::size_t turn = 0;
    while (!stop.load()) {
      std::vector<pollfd> watched;
      for (const auto& t : all) watched.push_back({t.fd, POLLIN, 0});
      ::poll(watched.data(), watched.size(), 20);
      int alive = 0;
      for (std::size_t i = 0; i < all.size(); ++i) {
        Trickler& t = all[i];
        if (watched[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          // The server answered (408) or closed: count it and come back, as slowloris does.
          const double lived = ms_since(t.opened);
          ++dropped;
          if (lived < header_timeout_ms - 200) ++dropped_early;
          if (lived > header_timeout_ms + 3000) ++dropped_late;
          ::close(t.fd);
          open(t);
          continue;
        }
        ++alive;
      }
      open_now = alive;
      // 1/60 of the connections send their next byte every 20 ms.
      for (std::size_t k = 0; k < all.size() / 60 + 1; ++k, ++turn) {
        Trickler& t = all[turn % all.size()];
        const char byte = t.sent < head.size() ? head[t.sent] : 'x';
        if (::send(t.fd, &byte, 1, MSG_NOSIGNAL) == 1) ++t.sent;
      }
    }
    for (auto& t : all) ::close(t.fd);
  });

  // The normal client: chat, /health and /metrics, one after another, each within 1 s.
  std::this_thread::sleep_for(1s);  // the attack is under way
  const Json chat = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 4}};
  const auto start = Clock::now();
  int answered = 0;
  double slowest_ms = 0;
  std::string slowest;
  int failures = 0;
  const int open_during_attack_probe = [&] {
    std::this_thread::sleep_for(100ms);
    return open_now.load();
  }();
  while (Clock::now() - start < hold - 1s) {
    for (const std::string path : {"/v1/chat/completions", "/health", "/metrics"}) {
      httplib::Client client("127.0.0.1", server.port());
      client.set_connection_timeout(5, 0);
      client.set_read_timeout(5, 0);
      const auto sent = Clock::now();
      auto result = path == "/v1/chat/completions" ? client.Post(path, chat.dump(), "application/json") : client.Get(path);
      const double took = ms_since(sent);
      if (!result || result->status != 200) ++failures;
      if (took > slowest_ms) {
        slowest_ms = took;
        slowest = path;
      }
      ++answered;
    }
    std::this_thread::sleep_for(200ms);
  }
  const int64_t open_connections = server.server().connection_stats().open_connections;
  stop = true;
  attacker.join();

  EXPECT_EQ(failures, 0);
  // 1 s as the issue asks; under the sanitizers the model's own compute is several times slower.
  EXPECT_LT(slowest_ms, deepinfer::testing::release_or_sanitized(1000, 3000)) << slowest;
  EXPECT_GT(answered, deepinfer::testing::release_or_sanitized(30, 3));
  // The attack was on: its connections were open on the server, and the deadline dropped them
  // near header_timeout after they opened, never before.
  EXPECT_GT(open_during_attack_probe, connections * 9 / 10);
  EXPECT_GT(open_connections, connections * 9 / 10);
  EXPECT_GE(dropped.load(), connections * 9 / 10);
  EXPECT_EQ(dropped_early.load(), 0);
  EXPECT_LT(dropped_late.load(), connections / 20);
  std::printf("slowloris: %d connections, %d dropped by the deadline, %d requests answered, slowest %.0f ms (%s)\n",
              connections, dropped.load(), answered, slowest_ms, slowest.c_str());
}

}  // namespace
}  // namespace deepinfer::server::testing

// Issue 19: a client that goes away at any moment (a reset right after its request, or 30 or 80
// ms later; a FIN; in the middle of its stream) has its request cancelled within 100 ms of
// leaving and counted as 499; after 1,000 of them the engine is idle and every block is free.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "raw_client.h"
#include "sanitizer_scale.h"
#include "held_requests.h"
#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

enum class Departure { ResetAt0, ResetAt30, ResetAt80, FinAt30, MidStream };
constexpr Departure kDepartures[] = {Departure::ResetAt0, Departure::ResetAt30, Departure::ResetAt80,
                                     Departure::FinAt30, Departure::MidStream};

// The server's request log lines with the time each was written.
struct LogRecorder {
  std::mutex mutex;
  std::vector<std::pair<Clock::time_point, std::string>> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard lock(mutex);
      lines.emplace_back(Clock::now(), line);
    };
  }
  std::size_t size() {
    std::lock_guard lock(mutex);
    return lines.size();
  }
};

// The request a departing client sends: an answer that would run for thousands of tokens.
std::string long_request(int max_tokens, bool stream, int variant) {
  const Json body = {{"model", "tiny"},
                     {"messages", {{{"role", "user"}, {"content", "Tell me a story " + std::to_string(variant)}}}},
                     {"max_tokens", max_tokens},
                     {"ignore_eos", true},
                     {"stream", stream}};
  return http_request("POST", "/v1/chat/completions", body.dump());
}

// Sends the request, leaves as `how` says, and returns when it left.
Clock::time_point send_and_leave(int port, Departure how, int max_tokens, int variant) {
  const int fd = connect_to(port);
  if (fd < 0) return Clock::now();
  send_all(fd, long_request(max_tokens, how == Departure::MidStream, variant));
  switch (how) {
    case Departure::ResetAt0: break;
    case Departure::ResetAt30:
    case Departure::FinAt30: std::this_thread::sleep_for(30ms); break;
    case Departure::ResetAt80: std::this_thread::sleep_for(80ms); break;
    case Departure::MidStream: read_for(fd, 30s, "\"content\""); break;  // a token or more has come
  }
  const Clock::time_point left = Clock::now();
  if (how == Departure::FinAt30) ::close(fd);
  else reset_close(fd);
  return left;
}

double series_value(const std::string& metrics, const std::string& series) {
  const std::size_t at = metrics.find(series + " ");
  return at == std::string::npos ? 0.0 : std::stod(metrics.substr(at + series.size() + 1));
}

TEST(ClientDepartures, EachKindIsCancelledWithin100msAndCountedAs499) {
  LogRecorder log;
  ServerOptions options = test_options();
  options.log = log.sink();
  RunningServer server(options);
  const int max_tokens = static_cast<int>(server.server().model().context_length() - 200);
  // One client at a time, so the log line that follows each departure is its request's.
  const int rounds = deepinfer::testing::release_or_sanitized(3, 1);
  const double bound_ms = deepinfer::testing::release_or_sanitized(100, 400);
  for (int round = 0; round < rounds; ++round)
    for (const Departure how : kDepartures) {
      SCOPED_TRACE(static_cast<int>(how));
      const std::size_t before = log.size();
      const Clock::time_point left = send_and_leave(server.port(), how, max_tokens, round);
      ASSERT_TRUE(wait_until([&] { return log.size() > before; }));
      std::pair<Clock::time_point, std::string> line;
      {
        std::lock_guard lock(log.mutex);
        line = log.lines.at(before);
      }
      const double after_ms = std::chrono::duration<double, std::milli>(line.first - left).count();
      EXPECT_LT(after_ms, bound_ms) << line.second;
      EXPECT_NE(line.second.find("status=499"), std::string::npos) << line.second;
      EXPECT_NE(line.second.find("client_disconnected=1"), std::string::npos) << line.second;
    }
}

TEST(ClientDepartures, AThousandDepartedClientsLeaveTheEngineIdleAndEveryBlockFree) {
  raise_file_limit();
  LogRecorder log;
  ServerOptions options = test_options();
  options.log = log.sink();
  RunningServer server(options);
  engine::Engine& engine = server.server().model().engine();
  const int max_tokens = static_cast<int>(server.server().model().context_length() - 200);
  const int clients = deepinfer::testing::release_or_sanitized(1000, 100);
  const int at_once = 50;
  const int64_t generated_before = engine.stats().generated_tokens;
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < at_once; ++t)
    threads.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < clients;)
        send_and_leave(server.port(), kDepartures[i % 5], max_tokens, i);
    });
  for (auto& thread : threads) thread.join();
  // Every request the server read is logged once it has been cancelled.
  ASSERT_TRUE(wait_until([&] { return log.size() >= static_cast<std::size_t>(clients) * 95 / 100; }));
  const engine::EngineStats stats = stats_after_cancellation(engine);
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.waiting, 0);
  EXPECT_EQ(stats.in_use_blocks, 0);
  EXPECT_EQ(stats.cached_blocks, 0);
  EXPECT_EQ(stats.free_blocks, stats.total_blocks);
  // Cancelled early: far from each answer's thousands of tokens.
  EXPECT_LT(stats.generated_tokens - generated_before, int64_t{clients} * max_tokens / 10);
  std::size_t counted = 0;
  {
    std::lock_guard lock(log.mutex);
    for (const auto& [when, line] : log.lines) {
      EXPECT_NE(line.find("status=499"), std::string::npos) << line;
      counted += line.find("status=499") != std::string::npos;
    }
  }
  // A reset can reach the server before it read the request (then there is nothing to count);
  // every request it did read is a 499, in the log and in the metrics.
  EXPECT_GE(counted, static_cast<std::size_t>(clients) * 95 / 100);
  const std::string metrics = server.client().Get("/metrics")->body;
  EXPECT_EQ(series_value(metrics, "deepinfer:requests_total{model_name=\"tiny\",endpoint=\"/v1/chat/completions\","
                                  "status=\"499\"}"),
            static_cast<double>(counted));
  EXPECT_EQ(metrics.find("endpoint=\"/v1/chat/completions\",status=\"200\""), std::string::npos);
  EXPECT_EQ(series_value(metrics, "deepinfer:num_requests_running{model_name=\"tiny\"}"), 0);
}

}  // namespace
}  // namespace deepinfer::server::testing

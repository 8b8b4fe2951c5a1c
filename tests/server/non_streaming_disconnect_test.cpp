// A client that leaves before its non-streaming answer is sent: the server notices without
// writing (its connection keeps a read pending, server/http_listener.h), cancels the request in
// the engine, frees its cache and counts it as 499, on every generating endpoint.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "server/http_message.h"
#include "server_fixture.h"

namespace deepinfer::server::testing {
namespace {

using Json = nlohmann::json;

// Sends one request on a fresh connection, waits, and closes it without reading the answer.
void post_and_hang_up(int port, const std::string& path, const Json& body, std::chrono::milliseconds wait) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  const std::string text = body.dump();
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                              "Content-Length: " + std::to_string(text.size()) + "\r\n\r\n" + text;
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::this_thread::sleep_for(wait);
  ::close(fd);
}

double series_value(const std::string& metrics, const std::string& series) {
  const std::size_t at = metrics.find(series + " ");
  return at == std::string::npos ? 0.0 : std::stod(metrics.substr(at + series.size() + 1));
}

TEST(NonStreamingDisconnect, TheRequestIsCancelledAndItsCacheFreedOnEveryEndpoint) {
  RunningServer server(test_options());
  engine::Engine& engine = server.server().model().engine();
  const int max_tokens = static_cast<int>(server.server().model().context_length() - 100);
  ASSERT_GT(max_tokens, 900);
  const Json user = {{{"role", "user"}, {"content", "Hello there"}}};
  const std::vector<std::pair<std::string, Json>> requests = {
      {"/v1/chat/completions",
       {{"model", "tiny"}, {"messages", user}, {"max_tokens", max_tokens}, {"ignore_eos", true}}},
      {"/v1/completions", {{"model", "tiny"}, {"prompt", "Once upon"}, {"max_tokens", max_tokens}, {"ignore_eos", true}}},
      {"/v1/messages", {{"model", "tiny"}, {"messages", user}, {"max_tokens", max_tokens}, {"ignore_eos", true}}},
      {"/v1/responses", {{"model", "tiny"}, {"input", "Hello there"}, {"max_output_tokens", max_tokens}}},
  };
  for (const auto& [path, body] : requests) {
    SCOPED_TRACE(path);
    const int64_t generated_before = engine.stats().generated_tokens;
    post_and_hang_up(server.port(), path, body, std::chrono::milliseconds(300));
    const engine::EngineStats stats = stats_after_cancellation(engine);
    EXPECT_EQ(stats.running, 0);
    EXPECT_EQ(stats.in_use_blocks, 0);
    // Cancelled long before the answer's end (a few hundred ms of a run of several seconds).
    EXPECT_LT(stats.generated_tokens - generated_before, max_tokens / 2);
    const std::string series = "deepinfer:requests_total{model_name=\"tiny\",endpoint=\"" + path + "\",status=\"" +
                               std::to_string(kClientClosedRequest) + "\"}";
    double counted = 0;
    for (int i = 0; i < 500 && counted == 0; ++i) {
      counted = series_value(server.client().Get("/metrics")->body, series);
      if (counted == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(counted, 1) << series;
  }
}

TEST(NonStreamingDisconnect, AClientStillWaitingIsNotGone) {
  RunningServer server(test_options());
  auto client = server.client();
  const Json body = {{"model", "tiny"}, {"prompt", "Once upon"}, {"max_tokens", 200}, {"ignore_eos", true}};
  auto result = client.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  EXPECT_EQ(Json::parse(result->body)["usage"]["completion_tokens"], 200);
}

}  // namespace
}  // namespace deepinfer::server::testing

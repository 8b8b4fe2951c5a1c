// The benchmark client over real HTTP: an in-process cpp-httplib server streams scripted SSE
// responses with known pauses, so the measured TTFT/ITL, the request bodies, the concurrency limit
// and the error paths can be checked before `deepinfer serve` exists.
#include "cli/bench_runner.h"

#include <gtest/gtest.h>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"

namespace deepinfer::cli::bench {
namespace {

using namespace std::chrono_literals;

class ScriptedServer {
 public:
  ScriptedServer() {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"tiny-v4","object":"model"}]})", "application/json");
    });
    server_.Post("/prefix/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const nlohmann::json body = nlohmann::json::parse(req.body);
      {
        std::lock_guard lock(mutex_);
        bodies_.push_back(body);
      }
      if (body["prompt"] == "refuse me") {
        res.status = 400;
        res.set_content(R"({"error":{"message":"prompt refused","type":"invalid_request_error"}})", "application/json");
        return;
      }
      const int active = ++active_;
      int seen = max_active_.load();
      while (active > seen && !max_active_.compare_exchange_weak(seen, active)) {
      }
      res.set_chunked_content_provider("text/event-stream", [this](std::size_t, httplib::DataSink& sink) {
        const auto send = [&](const std::string& data) {
          const std::string event = "data: " + data + "\n\n";
          sink.write(event.data(), event.size());
        };
        std::this_thread::sleep_for(60ms);
        send(R"({"choices":[{"index":0,"text":"one"}],"usage":null})");
        std::this_thread::sleep_for(40ms);
        send(R"({"choices":[{"index":0,"text":" two"}],"usage":null})");
        std::this_thread::sleep_for(40ms);
        send(R"({"choices":[{"index":0,"text":" three","finish_reason":"length"}],"usage":null})");
        send(R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_cache_hit_tokens":4}})");
        send("[DONE]");
        --active_;
        sink.done();
        return true;
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~ScriptedServer() {
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& prefix = "") const { return "http://127.0.0.1:" + std::to_string(port_) + prefix; }
  std::vector<nlohmann::json> bodies() {
    std::lock_guard lock(mutex_);
    return bodies_;
  }
  int max_active() const { return max_active_; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<nlohmann::json> bodies_;
  std::atomic<int> active_{0};
  std::atomic<int> max_active_{0};
};

// A port nobody listens on: bound, then closed again.
int closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), length), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

Conversation text_conversation(const std::string& prompt) {
  Conversation c;
  c.history = prompt;
  c.max_tokens = 3;
  return c;
}

TEST(BaseUrl, SplitsOriginAndPrefix) {
  EXPECT_EQ(split_base_url("http://h:8000").origin, "http://h:8000");
  EXPECT_EQ(split_base_url("http://h:8000").prefix, "");
  EXPECT_EQ(split_base_url("https://h/api/").origin, "https://h");
  EXPECT_EQ(split_base_url("https://h/api/").prefix, "/api");
  EXPECT_THROW(split_base_url("h:8000"), Error);
  EXPECT_THROW(split_base_url("ftp://h"), Error);
  EXPECT_THROW(split_base_url("http:///x"), Error);
}

TEST(Runner, AsksTheServerForItsModel) {
  ScriptedServer server;
  EXPECT_EQ(first_served_model(ServerTarget{server.url(), "", 10}), "tiny-v4");
}

TEST(Runner, MeasuresAStreamedRequestOverHttp) {
  ScriptedServer server;
  RunOptions options;
  options.target.base_url = server.url("/prefix/");
  options.model = "tiny-v4";
  std::vector<Conversation> conversations = {text_conversation("hello")};
  const RunOutcome outcome = run_benchmark(conversations, options);
  ASSERT_EQ(outcome.results.size(), 1u);
  const RequestResult& r = outcome.results[0];
  ASSERT_TRUE(r.ok) << r.error;
  // The server pauses 60 ms before the first chunk and 40 ms between chunks. A chunk arrives no
  // earlier than it is sent, but a late read of one chunk shortens the next gap, so what is
  // guaranteed is the first chunk's time and the last one's (the sum of the pauses), not each gap.
  EXPECT_GE(r.ttft_s, 0.055);
  EXPECT_LT(r.ttft_s, 1.0);
  ASSERT_EQ(r.itl_s.size(), 2u);
  double last_chunk_s = r.ttft_s;
  for (double gap : r.itl_s) {
    EXPECT_GE(gap, 0.0);
    last_chunk_s += gap;
  }
  EXPECT_GE(last_chunk_s, 0.135);
  EXPECT_GE(r.latency_s, last_chunk_s - 1e-6);
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_EQ(r.prompt_tokens, 10);
  EXPECT_EQ(r.cached_prompt_tokens, 4);
  EXPECT_GE(outcome.duration_s, r.latency_s);

  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 1u);
  EXPECT_EQ(bodies[0]["model"], "tiny-v4");
  EXPECT_EQ(bodies[0]["prompt"], "hello");
  EXPECT_EQ(bodies[0]["stream"], true);
  EXPECT_EQ(bodies[0]["stream_options"]["include_usage"], true);
  EXPECT_EQ(bodies[0]["ignore_eos"], true);
}

TEST(Runner, MultiTurnResendsTheReplyAndConcurrencyIsCapped) {
  ScriptedServer server;
  RunOptions options;
  options.target.base_url = server.url("/prefix");
  options.model = "m";
  options.max_concurrency = 2;
  std::vector<Conversation> conversations;
  for (int i = 0; i < 4; ++i) {
    Conversation c = text_conversation("prompt " + std::to_string(i));
    c.follow_ups = {"next"};
    conversations.push_back(c);
  }
  const RunOutcome outcome = run_benchmark(conversations, options);
  ASSERT_EQ(outcome.results.size(), 8u);
  for (const auto& r : outcome.results) EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(server.max_active(), 2);
  // Two at a time, two turns of ~140 ms each: four conversations take at least 2 x 280 ms.
  EXPECT_GE(outcome.duration_s, 0.5);
  int second_turns = 0;
  for (const auto& body : server.bodies()) second_turns += body["prompt"].get<std::string>().ends_with("one two three\n\nnext");
  EXPECT_EQ(second_turns, 4);
}

TEST(Runner, CountsHttpAndConnectionErrors) {
  ScriptedServer server;
  RunOptions options;
  options.target.base_url = server.url("/prefix");
  options.target.timeout_s = 5;
  options.model = "m";
  std::vector<Conversation> conversations = {text_conversation("refuse me"), text_conversation("fine")};
  const RunOutcome outcome = run_benchmark(conversations, options);
  ASSERT_EQ(outcome.results.size(), 2u);
  EXPECT_FALSE(outcome.results[0].ok);
  EXPECT_EQ(outcome.results[0].error, "HTTP 400: prompt refused");
  EXPECT_TRUE(outcome.results[1].ok);

  options.target.base_url = server.url("/missing");
  const RunOutcome not_found = run_benchmark({text_conversation("x")}, options);
  EXPECT_NE(not_found.results[0].error.find("HTTP 404"), std::string::npos);

  options.target.base_url = "http://127.0.0.1:" + std::to_string(closed_port());
  const RunOutcome refused = run_benchmark({text_conversation("x")}, options);
  ASSERT_EQ(refused.results.size(), 1u);
  EXPECT_FALSE(refused.results[0].ok);
  EXPECT_NE(refused.results[0].error.find("request failed"), std::string::npos) << refused.results[0].error;
  EXPECT_THROW(first_served_model(options.target), Error);
}

}  // namespace
}  // namespace deepinfer::cli::bench

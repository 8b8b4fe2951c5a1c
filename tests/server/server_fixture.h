#pragma once
// An in-process server on a free port, and the models the server tests run.
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/server.h"
#include "support/random_checkpoint.h"
#include "support/scratch_dir.h"

namespace deepinfer::server::testing {

inline std::string tokenizer_path() { return std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json"; }

// The tiny V4 config's shapes with the full 129280-id vocabulary and random weights, so chat
// prompts (whose markers have ids near 128800) fit. Written once per test process.
inline const std::string& full_vocab_model_dir() {
  static test_support::ScratchDir dir;
  static const std::string path = [] {
    std::ifstream in(std::string(DEEPINFER_TEST_DATA_DIR) + "/configs/tiny_v4.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["vocab_size"] = 129280;
    std::ofstream(dir.str() + "/config.json") << config.dump(2);
    test_support::write_random_checkpoint(dir.str());
    return dir.str();
  }();
  return path;
}

inline ServerOptions test_options(const std::string& model_dir = full_vocab_model_dir()) {
  ServerOptions options;
  options.model_dir = model_dir;
  options.tokenizer = tokenizer_path();
  options.served_model_name = "tiny";
  options.port = 0;
  options.http_threads = 32;
  options.engine.cache_memory_bytes = 64 << 20;
  options.shutdown_timeout = std::chrono::seconds(5);
  options.log = [](const std::string&) {};
  return options;
}

class RunningServer {
 public:
  explicit RunningServer(ServerOptions options) : server_(std::move(options)) {
    port_ = server_.bind();
    thread_ = std::thread([this] { server_.serve(); });
    httplib::Client probe("127.0.0.1", port_);
    for (int i = 0; i < 200 && !probe.Get("/health"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ~RunningServer() {
    server_.shutdown();
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(60, 0);
    return client;
  }
  Server& server() { return server_; }
  int port() const { return port_; }

 private:
  Server server_;
  int port_ = 0;
  std::thread thread_;
};

// A suite whose tests share one server on the tiny model, started for the suite and stopped after.
class SharedServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new RunningServer(test_options()); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static RunningServer& server() { return *server_; }

  static inline RunningServer* server_ = nullptr;
};

// The JSON payloads of an SSE body's "data:" lines, in order ("[DONE]" kept as a string).
// After a client left mid-request: waits (up to 5 s, far less than generating the whole context
// would take, so only a cancellation ends it in time) for the engine to run and queue nothing,
// empties the prefix cache and returns the stats, whose in_use_blocks must then be 0.
inline engine::EngineStats stats_after_cancellation(engine::Engine& engine) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    const engine::EngineStats stats = engine.stats();
    if (stats.running == 0 && stats.waiting == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  engine.clear_prefix_cache();
  return engine.stats();
}

// A POST of the JSON `body` to `path`, for a client's send() with a content receiver of its own.
inline httplib::Request json_post_request(const std::string& path, const std::string& body) {
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.set_header("Content-Type", "application/json");
  return request;
}

// Posts a streaming request, reads three chunks of its answer and hangs up; returns the chunks read.
inline int read_three_chunks_and_hang_up(RunningServer& server, const std::string& path, const std::string& body) {
  httplib::Request request = json_post_request(path, body);
  int chunks = 0;
  request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 3; };
  auto client = server.client();
  client.send(request);  // returns once the receiver refused more
  return chunks;
}

inline std::vector<std::string> sse_data_lines(const std::string& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < body.size()) {
    std::size_t end = body.find("\n\n", at);
    if (end == std::string::npos) end = body.size();
    std::string frame = body.substr(at, end - at);
    std::size_t line_start = 0;
    while (line_start < frame.size()) {
      std::size_t line_end = frame.find('\n', line_start);
      if (line_end == std::string::npos) line_end = frame.size();
      std::string line = frame.substr(line_start, line_end - line_start);
      if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
      line_start = line_end + 1;
    }
    at = end + 2;
  }
  return out;
}

}  // namespace deepinfer::server::testing

#pragma once
// `deepinfer serve --data-parallel N`: N engine ranks (rank_processes.h: one process, model copy,
// cache and prefix cache each, on its own GPU) behind one HTTP endpoint. The front holds no model:
// it renders and encodes each prompt (routing_prompt.h) to place it with the rank router
// (parallel/rank_router.h: where its prefix is cached while loads are balanced, else the least
// loaded rank, its load being the requests the front has in flight there), passes the request
// through (upstream_client.h) and the answer back as it comes (proxied_answer.h). Everything the
// endpoints mean stays in the ranks; the front answers only /health (every rank's state) and
// /metrics (the ranks' metrics labelled engine="i", and its own).
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/prompt_renderer.h"
#include "api/prompt_tokens.h"
#include "parallel/rank_router.h"
#include "server/http_listener.h"
#include "server/rank_processes.h"
#include "server/server_options.h"
#include "server/upstream_client.h"

namespace deepinfer::server {

struct FrontOptions {
  // The listener's side (host, port, limits, timeouts, cors, log) and the model folder and
  // tokenizer the prompts are encoded with; the engine options go to the ranks on their command
  // lines (launch.args).
  ServerOptions server;
  RankLaunch launch;
  int64_t block_tokens = 64;  // the ranks' prefix-cache block
};

class DataParallelFront {
 public:
  // Loads the tokenizer, starts every rank and waits until each listens; throws deepinfer::Error.
  explicit DataParallelFront(FrontOptions options);
  ~DataParallelFront();
  DataParallelFront(const DataParallelFront&) = delete;
  DataParallelFront& operator=(const DataParallelFront&) = delete;

  int bind();
  void serve();
  // New requests get 503; every rank drains (its own --shutdown-timeout) and stops; then the
  // front's connections close and serve() returns. Any thread, more than once.
  void shutdown();

  int port() const { return port_; }
  const std::string& model_name() const { return model_name_; }
  int ranks() const { return ranks_->ranks(); }
  RankState rank_state(int rank) const { return ranks_->state(rank); }

 private:
  void handle(HttpRequest& request, HttpResponse& response);
  void answer_health(HttpResponse& response);
  void answer_metrics(HttpResponse& response);
  void pass_through(HttpRequest& request, HttpResponse& response);

  FrontOptions options_;
  std::string model_name_;
  std::unique_ptr<api::PromptEncoder> encoder_;
  api::PromptFormat format_ = api::PromptFormat::V41;

  std::mutex router_mutex_;
  parallel::RankRouter router_;
  std::unique_ptr<std::atomic<int64_t>[]> in_flight_;  // per rank, requests passed and not answered
  std::unique_ptr<std::atomic<int64_t>[]> routed_;     // per rank, requests passed in all
  std::vector<int> rank_ports_;                         // per rank, its port while up (router_mutex_)

  // The destructor takes them down listener first (the connections and the answers they drive),
  // then the ranks, then the client.
  std::unique_ptr<RankProcesses> ranks_;
  std::unique_ptr<UpstreamClient> client_;
  std::unique_ptr<HttpListener> listener_;
  std::atomic<bool> draining_{false};
  int port_ = -1;
};

}  // namespace deepinfer::server

#include "server/data_parallel_front.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/model_config.h"
#include "server/http_io.h"
#include "server/listener_setup.h"
#include "server/metrics_merge.h"
#include "server/proxied_answer.h"
#include "server/routing_prompt.h"

namespace deepinfer::server {
namespace {

constexpr std::chrono::milliseconds kMetricsTimeout{5000};

api::ApiError unavailable(const std::string& message) {
  return api::ApiError(503, message, "", "server_error", "unavailable");
}

parallel::RankRouterOptions router_options(int64_t block_tokens) {
  parallel::RankRouterOptions options;
  options.block_tokens = block_tokens;
  return options;
}

std::string served_name(const ServerOptions& options) {
  if (!options.served_model_name.empty()) return options.served_model_name;
  const std::filesystem::path dir = std::filesystem::path(options.model_dir).lexically_normal();
  return (dir.has_filename() ? dir.filename() : dir.parent_path().filename()).string();
}

}  // namespace

DataParallelFront::DataParallelFront(FrontOptions options)
    : options_(std::move(options)),
      router_(static_cast<int64_t>(options_.launch.args.size()), router_options(options_.block_tokens)) {
  ServerOptions& server = options_.server;
  if (!server.log) server.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  if (!options_.launch.log) options_.launch.log = server.log;
  model_name_ = served_name(server);
  // The prompt encoding the ranks use, without their weights.
  const ModelConfig config = load_model_config(server.model_dir);
  format_ = config.family == ModelFamily::V41 ? api::PromptFormat::V41 : api::PromptFormat::V4;
  std::string tokenizer = server.tokenizer;
  if (tokenizer.empty()) tokenizer = (std::filesystem::path(server.model_dir) / "tokenizer.json").string();
  encoder_ = std::make_unique<api::PromptEncoder>(Tokenizer::from_file(tokenizer), format_);

  const std::size_t ranks = options_.launch.args.size();
  in_flight_ = std::make_unique<std::atomic<int64_t>[]>(ranks);
  routed_ = std::make_unique<std::atomic<int64_t>[]>(ranks);
  client_ = std::make_unique<UpstreamClient>();
  ranks_ = std::make_unique<RankProcesses>(options_.launch);
  for (int r = 0; r < ranks_->ranks(); ++r) rank_ports_.push_back(ranks_->state(r).port);
  // A rank that went down took its cache and its port with it: what the router recorded there is
  // gone, and so are the pooled connections to it.
  ranks_->set_on_change([this](int rank, bool up) {
    std::lock_guard lock(router_mutex_);
    router_.forget(rank);
    int& port = rank_ports_[static_cast<std::size_t>(rank)];
    if (!up && port > 0) client_->forget_port(port);
    port = up ? ranks_->state(rank).port : 0;
  });

  // Each client connection may hold one connection to a rank as well.
  const int64_t files = raise_open_file_limit();
  const ListenerOptions listener =
      listener_options(server, server.max_connections > 0 ? server.max_connections : std::max<int64_t>(16, files / 2 - 64));

  HttpListener::Callbacks callbacks;
  callbacks.http_error = http_layer_error;
  callbacks.refuse_head = [](const HttpRequest&, HttpResponse&) { return false; };  // the ranks judge requests
  callbacks.answer_inline = [](const HttpRequest& request) { return request.path == "/health"; };
  callbacks.handle = [this](HttpRequest& request, HttpResponse& response) { handle(request, response); };
  if (server.cors) callbacks.decorate = add_cors_headers;
  listener_ = std::make_unique<HttpListener>(listener, std::move(callbacks));
}

DataParallelFront::~DataParallelFront() {
  shutdown();
  listener_.reset();  // every answer (and its upstream call) goes with its connection
  ranks_->set_on_change(nullptr);
  ranks_.reset();
  client_.reset();
}

int DataParallelFront::bind() {
  port_ = listener_->bind();
  return port_;
}

void DataParallelFront::serve() {
  if (port_ < 0) fail("DataParallelFront::serve: bind() first");
  listener_->run();
}

void DataParallelFront::shutdown() {
  if (draining_.exchange(true)) return;
  // Each rank drains its running requests for its own --shutdown-timeout; their answers flow
  // through the front meanwhile, and end when the ranks close their connections.
  ranks_->stop(options_.server.shutdown_timeout + std::chrono::seconds(10));
  listener_->wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  listener_->stop();
}

void DataParallelFront::handle(HttpRequest& request, HttpResponse& response) {
  const bool get = request.method == "GET" || request.method == "HEAD";
  if (get && request.path == "/health") return answer_health(response);
  if (get && request.path == "/metrics") return answer_metrics(response);
  try {
    pass_through(request, response);
  } catch (const api::ApiError& error) {
    response.producer.reset();
    send_error(request, response, error);
  } catch (const std::exception& error) {
    response.producer.reset();
    send_error(request, response,
               api::ApiError(500, std::string("internal error: ") + error.what(), "", "internal_error", "internal_error"));
  }
}

void DataParallelFront::answer_health(HttpResponse& response) {
  nlohmann::ordered_json engines = nlohmann::ordered_json::array();
  int up = 0;
  for (int r = 0; r < ranks(); ++r) {
    const RankState state = ranks_->state(r);
    up += state.up ? 1 : 0;
    engines.push_back({{"rank", r}, {"up", state.up}, {"restarts", state.restarts}});
  }
  if (draining_) return send_error("/health", response, unavailable("The server is shutting down"));
  // Serving while any rank is: a load balancer in front keeps sending; the body says which are down.
  send_json(response, {{"status", up > 0 ? "ok" : "unavailable"}, {"engines", std::move(engines)}}, up > 0 ? 200 : 503);
}

void DataParallelFront::answer_metrics(HttpResponse& response) {
  HttpRequest scrape;
  scrape.method = "GET";
  scrape.target = scrape.path = "/metrics";
  std::vector<RankMetrics> texts;
  for (int r = 0; r < ranks(); ++r) {
    const RankState state = ranks_->state(r);
    if (!state.up) continue;
    UpstreamClient::Reply reply = client_->fetch(state.port, scrape, kMetricsTimeout);
    if (reply.error.empty() && reply.status == 200) texts.push_back({r, std::move(reply.body)});
  }
  std::string out = merge_rank_metrics(texts);
  const std::string model = "model_name=\"" + model_name_ + "\"";
  auto family = [&](const std::string& name, const std::string& type, const std::string& help, auto value_of) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (int r = 0; r < ranks(); ++r)
      out += name + "{" + model + ",engine=\"" + std::to_string(r) + "\"} " + std::to_string(value_of(r)) + "\n";
  };
  family("deepinfer:data_parallel_engine_up", "gauge", "Whether the engine rank is listening (1) or down (0).",
         [&](int r) { return ranks_->state(r).up ? 1 : 0; });
  family("deepinfer:data_parallel_engine_restarts_total", "counter", "Times the engine rank was restarted after it died.",
         [&](int r) { return ranks_->state(r).restarts; });
  family("deepinfer:data_parallel_requests_routed_total", "counter", "Requests the front passed to the engine rank.",
         [&](int r) { return routed_[static_cast<std::size_t>(r)].load(); });
  family("deepinfer:data_parallel_requests_in_flight", "gauge",
         "Requests passed to the engine rank and not yet answered (the router's load).",
         [&](int r) { return in_flight_[static_cast<std::size_t>(r)].load(); });
  response.set_content(std::move(out), "text/plain; version=0.0.4");
}

void DataParallelFront::pass_through(HttpRequest& request, HttpResponse& response) {
  if (draining_) throw unavailable("The server is shutting down");
  const RoutingRequest routing = routing_request(request, *encoder_, format_);
  int rank = -1;
  int port = 0;
  {
    std::lock_guard lock(router_mutex_);
    std::vector<int64_t> loads(static_cast<std::size_t>(ranks()));
    std::vector<bool> up(loads.size());
    std::vector<int> ports(loads.size());
    bool any = false;
    for (int r = 0; r < ranks(); ++r) {
      const RankState state = ranks_->state(r);
      loads[static_cast<std::size_t>(r)] = in_flight_[static_cast<std::size_t>(r)].load();
      up[static_cast<std::size_t>(r)] = state.up;
      ports[static_cast<std::size_t>(r)] = state.port;
      any |= state.up;
    }
    if (!any) throw unavailable("No engine rank is up (they are restarting); try again shortly");
    rank = static_cast<int>(router_.route(routing.prompt, loads, up));
    port = ports[static_cast<std::size_t>(rank)];
    ++in_flight_[static_cast<std::size_t>(rank)];
    ++routed_[static_cast<std::size_t>(rank)];
  }
  auto answer = std::make_shared<ProxiedAnswer>(request.path, routing.stream, rank,
                                                [this, rank] { --in_flight_[static_cast<std::size_t>(rank)]; });
  answer->attach(client_->start(port, request, answer->observer()));
  response.producer = std::move(answer);
}

}  // namespace deepinfer::server

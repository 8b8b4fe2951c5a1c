#include "server/server.h"

#include <cstdio>
#include <filesystem>

#include <httplib.h>

#include "core/error.h"
#include "server/handlers.h"
#include "server/http_io.h"
#include "server/listen_backlog.h"

namespace deepinfer::server {
namespace {

using Handler = void (*)(const HandlerContext&, const httplib::Request&, httplib::Response&, Clock::time_point);

bool needs_key(const std::string& path) { return path.rfind("/v1/", 0) == 0 || path == "/chat/completions" ||
                                                 path == "/completions" || path == "/messages" || path == "/responses" ||
                                                 path == "/models" || path == "/messages/count_tokens" ||
                                                 path == "/tokenize" || path == "/detokenize"; }

bool key_matches(const httplib::Request& request, const std::string& key) {
  const std::string bearer = request.get_header_value("Authorization");
  if (bearer == "Bearer " + key) return true;
  return request.get_header_value("x-api-key") == key;  // Anthropic clients send this header
}

}  // namespace

Server::Server(ServerOptions options) : options_(std::move(options)) {
  if (!options_.log) options_.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  model_ = std::make_unique<ServedModel>(options_);
  http_ = std::make_unique<httplib::Server>();
  const int threads = std::max(1, options_.http_threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(static_cast<size_t>(std::max<int64_t>(1, options_.max_body_bytes)));
  install_routes();
}

Server::~Server() {
  shutdown();
}

void Server::install_routes() {
  HandlerContext context{*model_, metrics_, options_.log};
  httplib::Server& http = *http_;

  http.set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
    if (options_.cors && request.method == "OPTIONS") {
      response.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!options_.api_key.empty() && needs_key(request.path) && !key_matches(request, options_.api_key)) {
      send_error(request, response,
                 api::ApiError(401, "Incorrect API key provided.", "", "authentication_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  if (options_.cors)
    http.set_post_routing_handler([](const httplib::Request&, httplib::Response& response) {
      response.set_header("Access-Control-Allow-Origin", "*");
      response.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      response.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
    });
  // Statuses httplib sets itself (404 unknown path or method, 413 body too large, 400 bad HTTP) get
  // the error object too. Every error goes out through send_error, which picks the endpoint's
  // shape (Anthropic's on /v1/messages and under it, OpenAI's elsewhere).
  http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& request,
                                                                  httplib::Response& response) {
    if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = "HTTP error " + std::to_string(response.status);
    if (response.status == 404) message = "Not found: " + request.method + " " + request.path;
    if (response.status == 413) message = "The request body is larger than the server's limit";
    send_error(request, response, api::ApiError(response.status, message));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request& request, httplib::Response& response, std::exception_ptr) {
    send_error(request, response, api::ApiError(500, "internal server error", "", "internal_error", "internal_error"));
  });

  auto generation_route = [this, context](const std::string& endpoint, Handler handler) {
    return [this, context, endpoint, handler](const httplib::Request& request, httplib::Response& response) {
      const Clock::time_point arrival = Clock::now();
      auto refuse = [&](const api::ApiError& error) {
        send_error(request, response, error);
        RequestRecord record;
        record.endpoint = endpoint;
        record.status = error.status();
        record.latency = std::chrono::duration<double>(Clock::now() - arrival).count();
        context.report("", record, 0);
      };
      try {
        if (draining_) throw api::ApiError(503, "The server is shutting down", "", "server_error", "unavailable");
        handler(context, request, response, arrival);
      } catch (const api::ApiError& error) {
        refuse(error);
      } catch (const std::exception& error) {
        refuse(api::ApiError(500, std::string("internal error: ") + error.what(), "", "internal_error",
                             "internal_error"));
      }
    };
  };
  // Counting and converting tokens generates nothing: no metrics, and it still works while draining.
  auto token_route = [context](Handler handler) {
    return [context, handler](const httplib::Request& request, httplib::Response& response) {
      try {
        handler(context, request, response, Clock::now());
      } catch (const api::ApiError& error) {
        send_error(request, response, error);
      }
    };
  };
  http.Post("/tokenize", token_route(handle_tokenize));
  http.Post("/detokenize", token_route(handle_detokenize));
  for (const std::string prefix : {"/v1", ""}) {
    http.Post(prefix + "/chat/completions", generation_route("/v1/chat/completions", handle_chat_completions));
    http.Post(prefix + "/completions", generation_route("/v1/completions", handle_completions));
    http.Post(prefix + "/messages", generation_route("/v1/messages", handle_messages));
    http.Post(prefix + "/responses", generation_route("/v1/responses", handle_responses));
    http.Post(prefix + "/messages/count_tokens", token_route(handle_count_tokens));
    http.Get(prefix + "/models", [this](const httplib::Request&, httplib::Response& response) {
      nlohmann::ordered_json model = {{"id", model_->name()},
                                      {"object", "model"},
                                      {"created", unix_seconds()},
                                      {"owned_by", "deepinfer"},
                                      {"root", options_.model_dir},
                                      {"max_model_len", model_->context_length()}};
      send_json(response, {{"object", "list"}, {"data", nlohmann::ordered_json::array({model})}});
    });
  }
  http.Get("/health", [this](const httplib::Request& request, httplib::Response& response) {
    if (draining_) {
      send_error(request, response,
                 api::ApiError(503, "The server is shutting down", "", "server_error", "unavailable"));
      return;
    }
    send_json(response, {{"status", "ok"}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(metrics_.render(model_->engine().stats(), model_->name()), "text/plain; version=0.0.4");
  });
}

int Server::bind() {
  const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                                      : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port < 0) fail("cannot listen on ", options_.host, ":", options_.port, " (address in use or not available)");
  port_ = port;
  if (!widen_listen_backlog(port_))
    options_.log("deepinfer serve: could not widen the listen backlog; bursts of connections may wait");
  return port_;
}

void Server::serve() {
  if (port_ < 0) fail("Server::serve: bind() first");
  http_->listen_after_bind();
}

void Server::shutdown() {
  if (draining_.exchange(true)) return;
  model_->engine().drain();
  http_->stop();
}

}  // namespace deepinfer::server

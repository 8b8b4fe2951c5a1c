#include "server/server.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/error.h"
#include "server/handlers.h"
#include "server/http_io.h"
#include "server/listener_setup.h"

namespace deepinfer::server {
namespace {

using Handler = void (*)(const HandlerContext&, const HttpRequest&, HttpResponse&, Clock::time_point);

enum class RouteKind { Generation, Tokens, Models, Health, Metrics };

struct Route {
  std::string method;  // GET routes also answer HEAD
  std::string path;
  RouteKind kind;
  std::string endpoint;  // the name metrics and logs use (generation routes)
  Handler handler = nullptr;
};

std::vector<Route> make_routes() {
  std::vector<Route> routes;
  routes.push_back({"POST", "/tokenize", RouteKind::Tokens, "", handle_tokenize});
  routes.push_back({"POST", "/detokenize", RouteKind::Tokens, "", handle_detokenize});
  for (const std::string prefix : {"/v1", ""}) {
    routes.push_back({"POST", prefix + "/chat/completions", RouteKind::Generation, "/v1/chat/completions",
                      handle_chat_completions});
    routes.push_back({"POST", prefix + "/completions", RouteKind::Generation, "/v1/completions", handle_completions});
    routes.push_back({"POST", prefix + "/messages", RouteKind::Generation, "/v1/messages", handle_messages});
    routes.push_back({"POST", prefix + "/responses", RouteKind::Generation, "/v1/responses", handle_responses});
    routes.push_back({"POST", prefix + "/messages/count_tokens", RouteKind::Tokens, "", handle_count_tokens});
    routes.push_back({"GET", prefix + "/models", RouteKind::Models, "", nullptr});
  }
  routes.push_back({"GET", "/health", RouteKind::Health, "", nullptr});
  routes.push_back({"GET", "/metrics", RouteKind::Metrics, "", nullptr});
  return routes;
}

const std::vector<Route>& routes() {
  static const std::vector<Route> table = make_routes();
  return table;
}

bool method_matches(const Route& route, const std::string& method) {
  return route.method == method || (route.method == "GET" && method == "HEAD");
}

const Route* find_route(const HttpRequest& request) {
  for (const Route& route : routes())
    if (route.path == request.path && method_matches(route, request.method)) return &route;
  return nullptr;
}

bool needs_key(const std::string& path) { return path.rfind("/v1/", 0) == 0 || path == "/chat/completions" ||
                                                 path == "/completions" || path == "/messages" || path == "/responses" ||
                                                 path == "/models" || path == "/messages/count_tokens" ||
                                                 path == "/tokenize" || path == "/detokenize"; }

// Equal strings, in time that depends on their lengths only, not on where they first differ.
bool constant_time_equal(std::string_view given, std::string_view key) {
  unsigned char difference = given.size() == key.size() ? 0 : 1;
  for (std::size_t i = 0; i < given.size(); ++i)
    difference |= static_cast<unsigned char>(given[i] ^ (key.empty() ? 0 : key[i % key.size()]));
  return difference == 0;
}

// "Authorization: Bearer KEY" (the scheme in any case, RFC 9110 §11.1) or Anthropic's x-api-key.
bool key_matches(const HttpRequest& request, const std::string& key) {
  bool matched = false;
  const std::string authorization = request.get_header_value("Authorization");
  const std::size_t space = authorization.find(' ');
  if (space != std::string::npos && iequals(std::string_view(authorization).substr(0, space), "bearer")) {
    const std::size_t token = authorization.find_first_not_of(' ', space);
    matched |= token != std::string::npos && constant_time_equal(std::string_view(authorization).substr(token), key);
  }
  if (request.has_header("x-api-key")) matched |= constant_time_equal(request.get_header_value("x-api-key"), key);
  return matched;
}

}  // namespace

Server::Server(ServerOptions options) : options_(std::move(options)) {
  if (!options_.log) options_.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  const int64_t files = raise_open_file_limit();
  max_connections_ = options_.max_connections > 0 ? options_.max_connections : std::max<int64_t>(16, files - 64);
  model_ = std::make_unique<ServedModel>(options_);

  ListenerOptions listener = listener_options(options_, max_connections_);

  const HandlerContext context{*model_, metrics_, options_.log};
  HttpListener::Callbacks callbacks;
  callbacks.http_error = http_layer_error;
  callbacks.refuse_head = [this](const HttpRequest& request, HttpResponse& response) {
    if (options_.cors && request.method == "OPTIONS") {
      response.status = 204;
      return true;
    }
    if (!find_route(request)) {
      std::string allowed;
      for (const Route& route : routes())
        if (route.path == request.path)
          allowed += (allowed.empty() ? "" : ", ") + route.method + (route.method == "GET" ? ", HEAD" : "");
      if (allowed.empty()) {
        send_error(request, response, api::ApiError(404, "Not found: " + request.method + " " + request.path));
      } else {
        send_error(request, response,
                   api::ApiError(405, "Method " + request.method + " is not allowed on " + request.path));
        response.set_header("Allow", allowed);
      }
      return true;
    }
    if (!options_.api_key.empty() && needs_key(request.path) && !key_matches(request, options_.api_key)) {
      send_error(request, response,
                 api::ApiError(401, "Incorrect API key provided.", "", "authentication_error", "invalid_api_key"));
      return true;
    }
    return false;
  };
  callbacks.answer_inline = [](const HttpRequest& request) {
    const Route* route = find_route(request);
    return route && (route->kind == RouteKind::Health || route->kind == RouteKind::Metrics);
  };
  callbacks.handle = [this, context](HttpRequest& request, HttpResponse& response) {
    const Route* route = find_route(request);
    if (!route) {  // refuse_head answered every other request
      send_error(request, response, api::ApiError(404, "Not found: " + request.method + " " + request.path));
      return;
    }
    const Clock::time_point arrival = Clock::now();
    switch (route->kind) {
      case RouteKind::Generation: {
        auto refuse = [&](const api::ApiError& error) {
          response.producer.reset();
          send_error(request, response, error);
          RequestRecord record;
          record.endpoint = route->endpoint;
          record.status = error.status();
          record.latency = std::chrono::duration<double>(Clock::now() - arrival).count();
          context.report("", record, 0);
        };
        try {
          if (draining_) throw api::ApiError(503, "The server is shutting down", "", "server_error", "unavailable");
          route->handler(context, request, response, arrival);
        } catch (const api::ApiError& error) {
          refuse(error);
        } catch (const std::exception& error) {
          refuse(api::ApiError(500, std::string("internal error: ") + error.what(), "", "internal_error",
                               "internal_error"));
        } catch (...) {
          refuse(api::ApiError(500, "internal error", "", "internal_error", "internal_error"));
        }
        return;
      }
      case RouteKind::Tokens:
        // Counting and converting tokens generates nothing: no metrics, and it still works while draining.
        try {
          route->handler(context, request, response, arrival);
        } catch (const api::ApiError& error) {
          send_error(request, response, error);
        } catch (const std::exception& error) {
          send_error(request, response,
                     api::ApiError(500, std::string("internal error: ") + error.what(), "", "internal_error",
                                   "internal_error"));
        }
        return;
      case RouteKind::Models: {
        nlohmann::ordered_json model = {{"id", model_->name()},
                                        {"object", "model"},
                                        {"created", unix_seconds()},
                                        {"owned_by", "deepinfer"},
                                        {"root", options_.model_dir},
                                        {"max_model_len", model_->context_length()}};
        send_json(response, {{"object", "list"}, {"data", nlohmann::ordered_json::array({model})}});
        return;
      }
      case RouteKind::Health:
        if (draining_) {
          send_error(request, response,
                     api::ApiError(503, "The server is shutting down", "", "server_error", "unavailable"));
          return;
        }
        send_json(response, {{"status", "ok"}});
        return;
      case RouteKind::Metrics:
        response.set_content(metrics_.render(model_->engine().stats(), model_->name(), listener_->stats(),
                                             model_->model().backend().device_time()),
                             "text/plain; version=0.0.4");
        return;
    }
  };
  if (options_.cors) callbacks.decorate = add_cors_headers;
  listener_ = std::make_unique<HttpListener>(std::move(listener), std::move(callbacks));
}

Server::~Server() {
  shutdown();
  listener_.reset();  // every connection ends (and its request is cancelled) while the engine runs
}

int Server::bind() {
  port_ = listener_->bind();
  return port_;
}

void Server::serve() {
  if (port_ < 0) fail("Server::serve: bind() first");
  listener_->run();
}

void Server::shutdown() {
  if (draining_.exchange(true)) return;
  // Running requests finish; new generation requests get 503 meanwhile.
  InFlightRequests& in_flight = model_->in_flight();
  auto wait_for_requests = [&in_flight](Clock::time_point until) {
    while (in_flight.size() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return in_flight.size() == 0;
  };
  if (!wait_for_requests(Clock::now() + options_.shutdown_timeout)) {
    const std::size_t cancelled = in_flight.cancel_all(model_->engine());
    options_.log("deepinfer serve: the shutdown timeout passed; cancelled " + std::to_string(cancelled) +
                 " running request(s)");
    // Their answers end where they were cut (a stream's last events, a body's partial text).
    wait_for_requests(Clock::now() + std::chrono::seconds(2));
  }
  listener_->wait_idle(Clock::now() + std::chrono::seconds(1));
  model_->engine().drain();
  listener_->stop();
}

}  // namespace deepinfer::server

// The event loop behind upstream_client.h: one Boost.Asio thread runs every exchange as a C++20
// coroutine, so a call's state and the connection pool need no lock (cancel() posts to the loop).
// Beast's response parser reads heads and bodies (chunked or not) into a fixed buffer whose
// contents go to the observer after each read, never waiting for the buffer to fill.
#include "server/upstream_client.h"

#include <netinet/in.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using asio::awaitable;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// A pooled connection idle longer than this is closed instead of reused. The ranks keep idle
// connections longer (the front starts them with a long --keep-alive-timeout), so a reused one is
// rarely stale; a stale one is retried once anyway.
constexpr std::chrono::seconds kPoolIdle{60};
constexpr std::size_t kPoolPerPort = 512;
constexpr std::size_t kBodyChunk = 16 << 10;

bool hop_by_hop(std::string_view name) {
  for (std::string_view field : {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                                 "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host",
                                 "content-length", "expect"})
    if (iequals(name, field)) return true;
  return false;
}

}  // namespace

std::string upstream_request_bytes(const HttpRequest& request, int port) {
  std::string out = request.method + " " + request.target + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                    "\r\n";
  for (const auto& [name, value] : request.headers)
    if (!hop_by_hop(name)) out += name + ": " + value + "\r\n";
  if (!request.body.empty() || request.method == "POST") out += "Content-Length: " + std::to_string(request.body.size()) + "\r\n";
  out += "\r\n";
  out += request.body;
  return out;
}

struct UpstreamLoop {
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread;
  // Loop thread only: idle keep-alive connections per port, most recently used last.
  std::map<int, std::deque<std::pair<tcp::socket, Clock::time_point>>> idle;

  std::optional<tcp::socket> take(int port) {
    auto found = idle.find(port);
    if (found == idle.end()) return std::nullopt;
    auto& sockets = found->second;
    const Clock::time_point now = Clock::now();
    while (!sockets.empty()) {
      auto [socket, since] = std::move(sockets.back());
      sockets.pop_back();
      if (now - since <= kPoolIdle && socket.is_open()) return std::move(socket);
      boost::system::error_code ec;
      socket.close(ec);
    }
    return std::nullopt;
  }

  void give_back(int port, tcp::socket socket) {
    auto& sockets = idle[port];
    if (sockets.size() >= kPoolPerPort) {
      boost::system::error_code ec;
      sockets.front().first.close(ec);
      sockets.pop_front();
    }
    sockets.emplace_back(std::move(socket), Clock::now());
  }
};

namespace {

class Call final : public UpstreamCall, public std::enable_shared_from_this<Call> {
 public:
  Call(std::weak_ptr<UpstreamLoop> client, int port, std::string bytes, UpstreamObserver observer)
      : client_(std::move(client)), port_(port), bytes_(std::move(bytes)), observer_(std::move(observer)) {}

  void cancel() override {
    auto client = client_.lock();
    if (!client) return;
    asio::post(client->io, [self = shared_from_this()] {
      self->cancelled_ = true;
      if (self->socket_) {
        boost::system::error_code ec;
        self->socket_->close(ec);
      }
    });
  }

  // The exchange, on the loop thread.
  awaitable<void> run(UpstreamLoop& client) {
    for (bool retry_allowed = true;; retry_allowed = false) {
      bool reused = false;
      socket_.reset();
      if (auto pooled = client.take(port_)) {
        socket_.emplace(std::move(*pooled));
        reused = true;
      } else {
        socket_.emplace(client.io);
        auto [ec] = co_await socket_->async_connect(tcp::endpoint(asio::ip::address_v4::loopback(),
                                                                  static_cast<unsigned short>(port_)),
                                                    kTuple);
        if (cancelled_) co_return end("cancelled");
        if (ec) co_return end("cannot connect to the engine rank on port " + std::to_string(port_) + ": " + ec.message());
        boost::system::error_code ignored;
        socket_->set_option(tcp::no_delay(true), ignored);
      }
      if (cancelled_) co_return end("cancelled");
      auto [write_error, written] = co_await asio::async_write(*socket_, asio::buffer(bytes_), kTuple);
      if (cancelled_) co_return end("cancelled");
      if (write_error) {
        if (reused && retry_allowed) continue;
        co_return end("sending to the engine rank failed: " + write_error.message());
      }
      boost::beast::flat_buffer buffer;
      http::response_parser<http::buffer_body> parser;
      parser.body_limit(boost::none);
      auto [head_error, head_bytes] = co_await http::async_read_header(*socket_, buffer, parser, kTuple);
      if (cancelled_) co_return end("cancelled");
      if (head_error) {
        // A pooled connection the rank had closed: nothing came back, the request was not read.
        if (reused && retry_allowed && head_bytes == 0 && buffer.size() == 0) continue;
        co_return end("the engine rank closed the connection before answering: " + head_error.message());
      }
      UpstreamHead head;
      head.status = static_cast<int>(parser.get().result_int());
      for (const auto& field : parser.get()) {
        const std::string name(field.name_string());
        if (iequals(name, "content-type")) head.content_type = std::string(field.value());
        else if (!hop_by_hop(name)) head.headers.emplace_back(name, std::string(field.value()));
      }
      observer_.on_head(std::move(head));
      while (!parser.is_done()) {
        parser.get().body().data = chunk_;
        parser.get().body().size = sizeof chunk_;
        auto [read_error, read] = co_await http::async_read_some(*socket_, buffer, parser, kTuple);
        const std::size_t got = sizeof chunk_ - parser.get().body().size;
        if (got > 0) observer_.on_body(std::string_view(chunk_, got));
        if (cancelled_) co_return end("cancelled");
        if (read_error && read_error != http::error::need_buffer)
          co_return end("the engine rank's answer broke off: " + read_error.message());
      }
      if (parser.keep_alive() && buffer.size() == 0) client.give_back(port_, std::move(*socket_));
      socket_.reset();
      co_return end("");
    }
  }

 private:
  void end(const std::string& error) {
    if (ended_) return;
    ended_ = true;
    if (socket_) {
      boost::system::error_code ec;
      socket_->close(ec);
      socket_.reset();
    }
    observer_.on_end(error);
  }

  std::weak_ptr<UpstreamLoop> client_;
  int port_;
  std::string bytes_;
  UpstreamObserver observer_;
  // Loop thread only.
  std::optional<tcp::socket> socket_;
  bool cancelled_ = false;
  bool ended_ = false;
  char chunk_[kBodyChunk];
};

}  // namespace

UpstreamClient::UpstreamClient() : loop_(std::make_shared<UpstreamLoop>()) {
  loop_->thread = std::thread([impl = loop_.get()] { impl->io.run(); });
}

UpstreamClient::~UpstreamClient() {
  loop_->work.reset();
  loop_->io.stop();
  loop_->thread.join();
}

std::shared_ptr<UpstreamCall> UpstreamClient::start(int port, const HttpRequest& request, UpstreamObserver observer) {
  auto call = std::make_shared<Call>(loop_, port, upstream_request_bytes(request, port), std::move(observer));
  UpstreamLoop& client = *loop_;
  asio::co_spawn(client.io, [call, &client]() -> awaitable<void> { co_await call->run(client); }, asio::detached);
  return call;
}

void UpstreamClient::forget_port(int port) {
  asio::post(loop_->io, [loop = loop_.get(), port] {
    auto found = loop->idle.find(port);
    if (found == loop->idle.end()) return;
    for (auto& [socket, since] : found->second) {
      boost::system::error_code ec;
      socket.close(ec);
    }
    loop->idle.erase(found);
  });
}

UpstreamClient::Reply UpstreamClient::fetch(int port, const HttpRequest& request, std::chrono::milliseconds timeout) {
  struct State {
    std::mutex mutex;
    std::condition_variable done_changed;
    Reply reply;
    bool done = false;
  };
  auto state = std::make_shared<State>();
  UpstreamObserver observer;
  observer.on_head = [state](UpstreamHead head) {
    std::lock_guard lock(state->mutex);
    state->reply.status = head.status;
  };
  observer.on_body = [state](std::string_view bytes) {
    std::lock_guard lock(state->mutex);
    state->reply.body.append(bytes);
  };
  observer.on_end = [state](const std::string& error) {
    std::lock_guard lock(state->mutex);
    state->reply.error = error;
    state->done = true;
    state->done_changed.notify_all();
  };
  const std::shared_ptr<UpstreamCall> call = start(port, request, std::move(observer));
  std::unique_lock lock(state->mutex);
  if (!state->done_changed.wait_for(lock, timeout, [&] { return state->done; })) {
    lock.unlock();
    call->cancel();
    return Reply{0, "", "no answer within " + std::to_string(timeout.count()) + " ms"};
  }
  return state->reply;
}

}  // namespace deepinfer::server

// The event loop behind http_listener.h: Boost.Asio with C++20 coroutines. Every connection is
// two coroutines on one strand (so its state needs no lock): `reader` moves bytes from the
// socket into the connection's buffer as they arrive (and reports EOF or an error at once), and
// `run` parses requests from the buffer, hands them to the handler and writes the answers. A
// third, `watchdog`, enforces the deadlines.
#include "server/http_listener.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "core/error.h"

namespace deepinfer::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Strand = asio::strand<asio::io_context::executor_type>;
using Socket = asio::basic_stream_socket<tcp, Strand>;
using Timer = asio::basic_waitable_timer<Clock, asio::wait_traits<Clock>, Strand>;
using asio::awaitable;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr Clock::time_point kNever = Clock::time_point::max();

// After a FIN while a request is served, how long a probe waits for the reset a departed
// client's kernel answers with (a half-closed client answers nothing and is served).
constexpr std::chrono::milliseconds kProbeWindow{150};
constexpr std::chrono::milliseconds kProbeStep{3};
// Closing after an error whose request body was not read: what arrives within this is read and
// dropped first, so the client sees the answer rather than a reset.
constexpr std::chrono::milliseconds kLingerTime{1000};
constexpr std::size_t kLingerBytes = 1 << 20;
constexpr std::size_t kReadChunk = 64 << 10;

std::string chunk(std::string_view data) {
  char size[24];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out(size, static_cast<std::size_t>(n));
  out.append(data);
  out += "\r\n";
  return out;
}

}  // namespace

struct HttpListener::Impl {
  class Session;

  // Declared before the event loop: a connection still queued in the loop when it is destroyed
  // ends then, and its destructor uses these.
  ListenerOptions options;
  Callbacks callbacks;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> open{0};
  std::atomic<int64_t> busy{0};
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> refused{0};
  std::atomic<int64_t> timeouts{0};
  std::atomic<int64_t> gone{0};
  std::mutex mutex;  // sessions, busy's waiters, the run state
  std::condition_variable idle;
  std::condition_variable run_ended;
  bool running = false;
  bool run_done = false;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::thread reaper;  // stop()'s: ends the loop if connections outlast the grace period
  // The loop, then what runs on it (destroyed first).
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{io};
  asio::thread_pool workers;

  Impl(ListenerOptions o, Callbacks c)
      : options(std::move(o)), callbacks(std::move(c)), io(std::max(1, options.io_threads)),
        workers(static_cast<std::size_t>(std::max(1, options.worker_threads))) {}

  awaitable<void> accept_loop();
  void refuse(Socket& socket);
  void busy_done() {
    if (busy.fetch_sub(1) == 1) {
      std::lock_guard lock(mutex);
      idle.notify_all();
    }
  }
};

// One connection. Lives as long as one of its coroutines holds it.
class HttpListener::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Impl& owner, Socket socket)
      : owner_(owner), socket_(std::move(socket)), strand_(socket_.get_executor()), wake_(strand_),
        watchdog_(strand_), reader_resume_(strand_) {
    boost::system::error_code ec;
    const tcp::endpoint peer = socket_.remote_endpoint(ec);
    if (!ec) {
      remote_addr_ = peer.address().to_string();
      remote_port_ = peer.port();
    }
    socket_.set_option(tcp::no_delay(true), ec);
    socket_.non_blocking(true, ec);
  }
  ~Session() {
    owner_.open.fetch_sub(1);
    std::lock_guard lock(owner_.mutex);
    owner_.sessions.erase(this);
  }

  void start() {
    auto self = shared_from_this();
    asio::co_spawn(strand_, reader(self), asio::detached);
    asio::co_spawn(strand_, watchdog(self), asio::detached);
    asio::co_spawn(strand_, run(self), asio::detached);
  }

  // From any thread: close the connection (the server stops).
  void close_soon() {
    asio::post(strand_, [self = shared_from_this()] { self->close(); });
  }

 private:
  enum class DeadlineKind { None, Read, Write };

  // ---- state shared by the coroutines (all on strand_) ----
  void wake() {
    wake_pending_ = true;
    wake_.cancel();
  }

  awaitable<void> wait_wake(Clock::time_point until) {
    if (!wake_pending_ && !closed_) {
      wake_.expires_at(until);
      co_await wake_.async_wait(kTuple);
    }
    wake_pending_ = false;
  }

  void set_deadline(Clock::time_point at, DeadlineKind kind) {
    const bool sooner = at < deadline_;
    deadline_ = at;
    deadline_kind_ = kind;
    timed_out_ = false;
    if (sooner) watchdog_.cancel();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    socket_.cancel(ec);
    socket_.close(ec);
    watchdog_.cancel();
    reader_resume_.cancel();
    wake();
  }

  // ---- coroutines ----
  awaitable<void> watchdog(std::shared_ptr<Session>) {
    while (!closed_) {
      watchdog_.expires_at(deadline_);
      co_await watchdog_.async_wait(kTuple);
      if (closed_) break;
      if (deadline_ == kNever || Clock::now() < deadline_) continue;
      timed_out_ = true;
      owner_.timeouts.fetch_add(1);
      const DeadlineKind kind = deadline_kind_;
      deadline_ = kNever;
      if (kind == DeadlineKind::Write) {
        boost::system::error_code ec;
        socket_.cancel(ec);  // the write ends with an error: the client is treated as gone
      }
      wake();
    }
  }

  awaitable<void> reader(std::shared_ptr<Session>) {
    while (!closed_) {
      if (buffer_.size() >= buffer_cap()) {
        reader_resume_.expires_at(kNever);
        co_await reader_resume_.async_wait(kTuple);
        continue;
      }
      auto [wait_error] = co_await socket_.async_wait(tcp::socket::wait_read, kTuple);
      if (closed_) break;
      if (wait_error) {
        if (wait_error == asio::error::operation_aborted && !timed_out_) continue;  // cancelled by a probe? go on
        peer_gone_ = true;
        break;
      }
      boost::system::error_code ec;
      const std::size_t want = std::clamp<std::size_t>(socket_.available(ec), 1024, kReadChunk);
      const std::size_t old = buffer_.size();
      buffer_.resize(old + want);
      const std::size_t n = socket_.read_some(asio::buffer(buffer_.data() + old, buffer_.size() - old), ec);
      buffer_.resize(old + n);
      if (ec == asio::error::would_block || ec == asio::error::try_again) continue;
      if (ec == asio::error::eof) {
        peer_eof_ = true;
        break;
      }
      if (ec) {
        peer_gone_ = true;
        break;
      }
      wake();
    }
    reader_done_ = true;
    wake();
  }

  // What the buffer may hold before the reader pauses: a whole head (and a read) while a request
  // is read; while one is served only enough to keep seeing the client's departure, so a client
  // that pipelines without end costs 16 KiB, not more.
  std::size_t buffer_cap() const {
    return serving_ ? std::size_t{16} << 10 : owner_.options.limits.max_header_bytes + kReadChunk;
  }

  // Called after the parser took bytes from the buffer: a paused reader goes on.
  void consumed() {
    if (buffer_.size() < buffer_cap()) reader_resume_.cancel();
  }

  awaitable<bool> write_all(std::string data) {
    if (closed_ || write_failed_) co_return false;
    const Clock::time_point saved = deadline_;
    const DeadlineKind saved_kind = deadline_kind_;
    set_deadline(Clock::now() + owner_.options.write_timeout, DeadlineKind::Write);
    auto [ec, n] = co_await asio::async_write(socket_, asio::buffer(data), kTuple);
    (void)n;
    if (ec) write_failed_ = true;
    if (timed_out_) write_failed_ = true;
    set_deadline(saved, saved_kind);
    co_return !write_failed_;
  }

  std::string head(const HttpRequest& request, const HttpResponse& response, bool keep_alive,
                   std::optional<std::size_t> content_length, bool chunked) const {
    std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " + reason_phrase(response.status) + "\r\n";
    for (const auto& [name, value] : response.headers) out += name + ": " + value + "\r\n";
    if (!response.content_type.empty()) out += "Content-Type: " + response.content_type + "\r\n";
    if (content_length) out += "Content-Length: " + std::to_string(*content_length) + "\r\n";
    if (chunked) out += "Transfer-Encoding: chunked\r\n";
    if (keep_alive) {
      if (request.version == 10) out += "Connection: keep-alive\r\n";
      out += "Keep-Alive: timeout=" +
             std::to_string(std::max<int64_t>(1, owner_.options.keep_alive_timeout.count() / 1000)) + "\r\n";
    } else {
      out += "Connection: close\r\n";
    }
    out += "\r\n";
    return out;
  }

  awaitable<bool> write_response(const HttpRequest& request, HttpResponse& response, bool keep_alive) {
    // (request and response are the caller's and outlive the call.)
    if (owner_.callbacks.decorate) owner_.callbacks.decorate(response);
    const bool no_body = response.status == 204 || response.status == 304 || response.status < 200;
    std::string out = head(request, response, keep_alive,
                           no_body ? std::nullopt : std::optional<std::size_t>(response.body.size()), false);
    if (!no_body && request.method != "HEAD") out += response.body;
    const bool written = co_await write_all(std::move(out));
    co_return written;
  }

  // An answer the HTTP layer gives itself (error statuses), after which the connection closes.
  // (Coroutines here take their strings by value and are called with named values: GCC 12 has
  // destroyed temporaries of a co_await's full expression twice.)
  awaitable<void> refuse_and_close(std::string path, int status, std::string message, const HttpRequest* request) {
    HttpResponse response;
    owner_.callbacks.http_error(path, status, message, response);
    co_await write_response(*request, response, /*keep_alive=*/false);
    co_await linger_and_close();
  }

  // Stops sending, reads and drops what the client is still sending (up to a bound), then closes:
  // closing with unread bytes would reset the connection and could destroy the answer in flight.
  awaitable<void> linger_and_close() {
    if (!closed_) {
      boost::system::error_code ec;
      socket_.shutdown(tcp::socket::shutdown_send, ec);
      const Clock::time_point until = Clock::now() + kLingerTime;
      std::size_t dropped = 0;
      while (!closed_ && !reader_done_ && Clock::now() < until && dropped < kLingerBytes) {
        dropped += buffer_.size();
        buffer_.clear();
        consumed();
        co_await wait_wake(until);
      }
    }
    close();
  }

  // Whether the departed-or-half-closed question after a FIN has an answer yet: sends one probe
  // (an interim 100 Continue before a response head, an SSE comment inside a stream) and looks
  // for the reset a closed socket answers it with.
  struct Probe {
    bool sent = false;
    bool settled = false;  // the client is half-closed and still there
    Clock::time_point until{};
  };

  // The connection's smoothed round-trip time, as the kernel measured it.
  std::chrono::microseconds round_trip() const {
    tcp_info info{};
    socklen_t length = sizeof info;
    if (::getsockopt(const_cast<Socket&>(socket_).native_handle(), IPPROTO_TCP, TCP_INFO, &info, &length) != 0)
      return std::chrono::microseconds(0);
    return std::chrono::microseconds(info.tcpi_rtt);
  }

  bool socket_reset() const {
    pollfd watched{const_cast<Socket&>(socket_).native_handle(), 0, 0};
    return ::poll(&watched, 1, 0) > 0 && (watched.revents & (POLLHUP | POLLERR)) != 0;
  }

  // The client left (or the server stops) before the answer was complete: its request is
  // cancelled and counted, and the connection closes.
  void abandon(ResponseProducer& producer, bool& keep_alive) {
    owner_.gone.fetch_add(1);
    producer.abandon();
    keep_alive = false;
    close();
  }

  awaitable<void> serve_producer(const HttpRequest& request, HttpResponse& response, bool& keep_alive) {
    std::shared_ptr<ResponseProducer> producer = response.producer;
    // The engine's thread wakes this connection through its strand; the link is cut before the
    // producer (and this session) may go away.
    struct Link {
      std::mutex mutex;
      std::function<void()> wake;
    };
    auto link = std::make_shared<Link>();
    link->wake = [weak = weak_from_this(), strand = strand_] {
      asio::post(strand, [weak] {
        if (auto self = weak.lock()) self->wake();
      });
    };
    producer->set_wakeup([link] {
      std::lock_guard lock(link->mutex);
      if (link->wake) link->wake();
    });
    struct Unlink {
      std::shared_ptr<Link> link;
      ~Unlink() {
        std::lock_guard lock(link->mutex);
        link->wake = nullptr;
      }
    } unlink{link};

    while (!producer->head_ready()) {
      if (peer_gone_ || write_failed_ || closed_) {
        abandon(*producer, keep_alive);
        co_return;
      }
      co_await wait_wake(kNever);
    }
    const bool streaming = producer->streaming();
    const bool chunked = streaming && request.version >= 11;
    if (streaming) {
      if (!chunked) keep_alive = false;  // HTTP/1.0: the stream ends when the connection does
      HttpResponse stream_head;
      stream_head.status = 200;
      stream_head.content_type = "text/event-stream";
      stream_head.set_header("Cache-Control", "no-cache");
      stream_head.set_header("X-Accel-Buffering", "no");
      if (owner_.callbacks.decorate) owner_.callbacks.decorate(stream_head);
      std::string stream_start = head(request, stream_head, keep_alive, std::nullopt, chunked);
      co_await write_all(std::move(stream_start));
    }
    Probe probe;
    for (;;) {
      if (peer_eof_ && !probe.sent && !write_failed_ && !closed_) {
        keep_alive = false;  // nothing more can come from this client
        probe.sent = true;
        probe.until = Clock::now() + std::max<Clock::duration>(kProbeWindow, 4 * round_trip());
        if (streaming || request.version >= 11) {
          std::string probe_bytes = !streaming ? std::string("HTTP/1.1 100 Continue\r\n\r\n")
                                    : chunked  ? chunk(":\n\n")
                                               : std::string(":\n\n");
          co_await write_all(std::move(probe_bytes));
        } else {
          write_failed_ = true;  // HTTP/1.0 has no interim answer: a FIN means the client left
        }
      }
      if (probe.sent && !probe.settled) {
        if (socket_reset()) write_failed_ = true;
        else if (Clock::now() >= probe.until) probe.settled = true;
      }
      if (peer_gone_ || write_failed_ || closed_) {
        abandon(*producer, keep_alive);
        co_return;
      }
      std::string out;
      const bool done = producer->pump(out, response);
      if (!out.empty()) {
        std::string bytes = chunked ? chunk(out) : std::move(out);
        const bool written = co_await write_all(std::move(bytes));
        if (!written) continue;  // gone: handled above
      }
      if (done) break;
      if (out.empty()) {
        const Clock::time_point until = probe.sent && !probe.settled ? Clock::now() + kProbeStep : kNever;
        co_await wait_wake(until);
      }
    }
    if (streaming) {
      if (chunked) {
        std::string last_chunk = "0\r\n\r\n";
        co_await write_all(std::move(last_chunk));
      }
    } else {
      co_await write_response(request, response, keep_alive);
    }
  }

  awaitable<void> run(std::shared_ptr<Session> self) {
    const ListenerOptions& config = owner_.options;
    bool first = true;
    while (!closed_) {
      serving_ = false;
      consumed();  // a reader paused by the serving cap goes on
      RequestParser parser(config.limits);
      bool started = !buffer_.empty();
      set_deadline(Clock::now() + (first || started ? config.header_timeout : config.keep_alive_timeout),
                   DeadlineKind::Read);
      bool head_checked = false;
      bool answered_early = false;
      HttpResponse early;
      for (;;) {
        if (!buffer_.empty()) {
          if (!started) {
            started = true;
            set_deadline(Clock::now() + config.header_timeout, DeadlineKind::Read);
          }
          const bool had_head = parser.header_done();
          const std::size_t used = parser.feed(buffer_);
          buffer_.erase(0, used);
          consumed();
          // The body keeps arriving: the deadline moves with it.
          if (had_head && used > 0) set_deadline(Clock::now() + config.header_timeout, DeadlineKind::Read);
        }
        if (parser.error_status() != 0) break;
        if (parser.header_done() && !head_checked) {
          head_checked = true;
          set_deadline(Clock::now() + config.header_timeout, DeadlineKind::Read);
          HttpRequest& request = parser.request();
          if (request.version != 10 && request.version != 11) {
            co_await refuse_and_close(request.path, 505, "Only HTTP/1.0 and HTTP/1.1 are served", &request);
            co_return;
          }
          if (!is_standard_method(request.method)) {
            std::string message = "Method " + request.method + " is not implemented";
            co_await refuse_and_close(request.path, 501, std::move(message), &request);
            co_return;
          }
          if (owner_.callbacks.refuse_head && owner_.callbacks.refuse_head(request, early)) {
            answered_early = true;
            break;
          }
          if (parser.expects_continue() && !parser.done() && request.version >= 11) {
            std::string interim = "HTTP/1.1 100 Continue\r\n\r\n";
            const bool written = co_await write_all(std::move(interim));
            if (!written) {
              close();
              co_return;
            }
          }
          continue;  // the rest of the buffer may hold body bytes
        }
        if (parser.done()) break;
        if (closed_) co_return;
        if (timed_out_) {
          if (started) {
            std::string message = parser.header_done() ? "The request body stalled" : "The request head took too long";
            co_await refuse_and_close(parser.request().path, 408, std::move(message), &parser.request());
          } else {
            close();
          }
          co_return;
        }
        if (reader_done_ && buffer_.empty()) {
          // The client closed (or reset) before a whole request came: nobody to answer.
          close();
          co_return;
        }
        const Clock::time_point until = deadline_;
        co_await wait_wake(until);
      }
      HttpRequest& request = parser.request();
      if (parser.error_status() != 0) {
        co_await refuse_and_close(request.path, parser.error_status(), parser.error_message(), &request);
        co_return;
      }
      request.remote_addr = remote_addr_;
      request.remote_port = remote_port_;
      bool keep_alive = parser.keep_alive() && !owner_.stopping.load();
      set_deadline(kNever, DeadlineKind::None);
      serving_ = true;
      owner_.busy.fetch_add(1);
      struct BusyGuard {
        Impl& owner;
        ~BusyGuard() { owner.busy_done(); }
      } busy_guard{owner_};

      if (answered_early) {
        // Answered from the head alone: the connection goes on only if the body had come too.
        if (!parser.done()) keep_alive = false;
        const bool written = co_await write_response(request, early, keep_alive);
        if (!written || !keep_alive) {
          co_await linger_and_close();
          co_return;
        }
        first = false;
        continue;
      }

      HttpResponse response;
      if (owner_.callbacks.answer_inline && owner_.callbacks.answer_inline(request)) {
        owner_.callbacks.handle(request, response);
      } else {
        Callbacks* handlers = &owner_.callbacks;
        co_await asio::co_spawn(
            owner_.workers.get_executor(),
            [handlers, &request, &response]() -> awaitable<void> {
              handlers->handle(request, response);
              co_return;
            },
            asio::use_awaitable);
      }
      if (response.producer) {
        co_await serve_producer(request, response, keep_alive);
      } else if (peer_gone_ || closed_) {
        keep_alive = false;
      } else {
        if (peer_eof_) keep_alive = false;
        co_await write_response(request, response, keep_alive);
      }
      response.producer.reset();
      if (!keep_alive || write_failed_ || peer_gone_ || closed_) {
        if (!closed_ && !write_failed_ && !peer_gone_) co_await linger_and_close();
        close();
        co_return;
      }
      first = false;
    }
    (void)self;
  }

  Impl& owner_;
  Socket socket_;
  Strand strand_;
  Timer wake_;
  Timer watchdog_;
  Timer reader_resume_;
  std::string buffer_;  // received, not yet parsed
  std::string remote_addr_;
  int remote_port_ = 0;
  bool wake_pending_ = false;
  bool closed_ = false;
  bool reader_done_ = false;
  bool peer_eof_ = false;   // FIN: the client closed, or only its sending side
  bool peer_gone_ = false;  // reset or another error
  bool write_failed_ = false;
  bool timed_out_ = false;
  bool serving_ = false;  // a complete request is being answered
  Clock::time_point deadline_ = kNever;
  DeadlineKind deadline_kind_ = DeadlineKind::None;
};

void HttpListener::Impl::refuse(Socket& socket) {
  // Past max_connections: answered and closed at once, without reading the request (it may not
  // even have been sent), and without holding anything.
  refused.fetch_add(1);
  HttpResponse response;
  callbacks.http_error("", 503, "The server has too many open connections; retry later", response);
  std::string out = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: " + response.content_type +
                    "\r\nContent-Length: " + std::to_string(response.body.size()) +
                    "\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" + response.body;
  const int fd = socket.native_handle();
  (void)::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd, SHUT_WR);
  char drop[4096];
  while (::recv(fd, drop, sizeof drop, MSG_DONTWAIT) > 0) {
  }
  boost::system::error_code ec;
  socket.close(ec);
}

awaitable<void> HttpListener::Impl::accept_loop() {
  Timer pause(asio::make_strand(io));
  while (!stopping.load()) {
    Strand strand = asio::make_strand(io);
    auto [ec, socket] = co_await acceptor.async_accept(strand, kTuple);
    if (stopping.load() || ec == asio::error::operation_aborted) break;
    if (ec) {
      // Out of descriptors or memory for a moment: wait rather than spin.
      pause.expires_after(std::chrono::milliseconds(20));
      co_await pause.async_wait(kTuple);
      continue;
    }
    accepted.fetch_add(1);
    if (open.load() >= options.max_connections) {
      refuse(socket);
      continue;
    }
    open.fetch_add(1);
    auto session = std::make_shared<Session>(*this, std::move(socket));
    {
      std::lock_guard lock(mutex);
      sessions.emplace(session.get(), session);
    }
    session->start();
  }
}

HttpListener::HttpListener(ListenerOptions options, Callbacks callbacks)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(callbacks))) {}

HttpListener::~HttpListener() {
  stop();
  if (impl_->reaper.joinable()) impl_->reaper.join();
  impl_->workers.join();
}

int HttpListener::bind() {
  Impl& impl = *impl_;
  boost::system::error_code ec;
  tcp::resolver resolver(impl.io);
  const auto endpoints = resolver.resolve(impl.options.host, std::to_string(impl.options.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty())
    fail("cannot listen on ", impl.options.host, ":", impl.options.port, " (", ec ? ec.message() : "no address", ")");
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl.acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl.acceptor.bind(endpoint, ec);
  if (!ec) impl.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on ", impl.options.host, ":", impl.options.port, " (", ec.message(), ")");
  return impl.acceptor.local_endpoint().port();
}

void HttpListener::run() {
  Impl& impl = *impl_;
  if (!impl.acceptor.is_open()) fail("HttpListener::run: bind() first");
  if (impl.stopping.load()) return;
  {
    std::lock_guard lock(impl.mutex);
    if (impl.stopping.load()) return;
    impl.running = true;
    impl.work.emplace(impl.io.get_executor());
  }
  asio::co_spawn(impl.io, impl.accept_loop(), asio::detached);
  std::vector<std::thread> threads;
  for (int i = 1; i < impl.options.io_threads; ++i) threads.emplace_back([&impl] { impl.io.run(); });
  impl.io.run();
  for (auto& thread : threads) thread.join();
  {
    std::lock_guard lock(impl.mutex);
    impl.run_done = true;
  }
  impl.run_ended.notify_all();
}

bool HttpListener::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(impl_->mutex);
  return impl_->idle.wait_until(lock, deadline, [this] { return impl_->busy.load() == 0; });
}

void HttpListener::stop() {
  Impl& impl = *impl_;
  if (impl.stopping.exchange(true)) return;
  asio::post(impl.io, [&impl] {
    boost::system::error_code ec;
    impl.acceptor.close(ec);
  });
  std::vector<std::shared_ptr<Impl::Session>> open_sessions;
  {
    std::lock_guard lock(impl.mutex);
    for (auto& [raw, weak] : impl.sessions)
      if (auto session = weak.lock()) open_sessions.push_back(std::move(session));
  }
  for (auto& session : open_sessions) session->close_soon();
  open_sessions.clear();
  {
    std::lock_guard lock(impl.mutex);
    impl.work.reset();
  }
  // run() returns once every connection has ended; a handler still computing on a worker holds
  // its connection until it returns, so the loop is stopped outright after a grace period.
  impl.reaper = std::thread([&impl] {
    std::unique_lock lock(impl.mutex);
    if (!impl.run_ended.wait_for(lock, std::chrono::seconds(2), [&impl] { return !impl.running || impl.run_done; }))
      impl.io.stop();
  });
}

ListenerStats HttpListener::stats() const {
  const Impl& impl = *impl_;
  ListenerStats out;
  out.open_connections = impl.open.load();
  out.busy_connections = impl.busy.load();
  out.accepted_total = impl.accepted.load();
  out.refused_total = impl.refused.load();
  out.timeouts_total = impl.timeouts.load();
  out.client_gone_total = impl.gone.load();
  return out;
}

}  // namespace deepinfer::server

#include "server/proxied_answer.h"

#include <utility>

#include "api/api_error.h"
#include "api/chunk_anthropic_messages.h"
#include "api/sse_format.h"
#include "server/http_io.h"

namespace deepinfer::server {
namespace {

bool is_event_stream(const UpstreamHead& head) {
  return head.status == 200 && head.content_type.rfind("text/event-stream", 0) == 0;
}

bool path_is(const std::string& path, const std::string& endpoint) {
  return path == endpoint || path == "/v1" + endpoint;
}

}  // namespace

ProxiedAnswer::ProxiedAnswer(std::string path, bool stream_requested, int rank, std::function<void()> on_finish)
    : path_(std::move(path)), stream_requested_(stream_requested), rank_(rank), on_finish_(std::move(on_finish)) {}

ProxiedAnswer::~ProxiedAnswer() {
  if (call_) call_->cancel();  // a no-op once the exchange ended
  finish();
}

UpstreamObserver ProxiedAnswer::observer() {
  std::weak_ptr<ProxiedAnswer> weak = weak_from_this();
  UpstreamObserver observer;
  observer.on_head = [weak](UpstreamHead head) {
    if (auto self = weak.lock()) {
      {
        std::lock_guard lock(self->mutex_);
        self->head_ = std::move(head);
      }
      self->wake();
    }
  };
  observer.on_body = [weak](std::string_view bytes) {
    if (auto self = weak.lock()) {
      {
        std::lock_guard lock(self->mutex_);
        self->pending_.append(bytes);
      }
      self->wake();
    }
  };
  observer.on_end = [weak](const std::string& error) {
    if (auto self = weak.lock()) {
      {
        std::lock_guard lock(self->mutex_);
        self->ended_ = true;
        self->error_ = error;
      }
      self->wake();
    }
  };
  return observer;
}

void ProxiedAnswer::attach(std::shared_ptr<UpstreamCall> call) { call_ = std::move(call); }

bool ProxiedAnswer::head_ready() const {
  if (!stream_requested_) return true;
  std::lock_guard lock(mutex_);
  return head_.has_value() || ended_;
}

bool ProxiedAnswer::streaming() const {
  if (!stream_requested_) return false;
  std::lock_guard lock(mutex_);
  return head_ && is_event_stream(*head_);
}

void ProxiedAnswer::set_wakeup(std::function<void()> wakeup) {
  {
    std::lock_guard lock(mutex_);
    wakeup_ = std::move(wakeup);
  }
  wake();  // whatever arrived before the connection asked
}

void ProxiedAnswer::wake() {
  std::function<void()> wakeup;
  {
    std::lock_guard lock(mutex_);
    wakeup = wakeup_;
  }
  if (wakeup) wakeup();
}

std::string ProxiedAnswer::stream_error_frame(const std::string& message) const {
  const api::ApiError error(502, message, "", "server_error", "engine_failed");
  if (path_is(path_, "/messages")) return api::sse_event("error", api::messages_error(error));
  if (path_is(path_, "/responses"))
    return api::sse_event("error", api::WireJson{{"type", "error"}, {"code", "server_error"}, {"message", message},
                                                 {"param", nullptr}});
  return "data: " + error_body(error) + "\n\n";
}

bool ProxiedAnswer::pump(std::string& out, HttpResponse& response) {
  std::unique_lock lock(mutex_);
  const bool stream = head_ && stream_requested_ && is_event_stream(*head_);
  if (stream) {
    out.append(pending_);
    pending_.clear();
    if (!ended_) return false;
    if (!error_.empty()) out += stream_error_frame("engine rank " + std::to_string(rank_) + " failed mid-answer: " + error_);
  } else {
    if (!ended_) return false;
    if (error_.empty() && head_) {
      response.status = head_->status;
      response.content_type = head_->content_type;
      for (const auto& [name, value] : head_->headers) response.set_header(name, value);
      response.body = std::move(pending_);
    } else {
      const std::string what = error_.empty() ? "no answer" : error_;
      send_error(path_, response, api::ApiError(502, "engine rank " + std::to_string(rank_) + " failed: " + what, "",
                                                "server_error", "engine_failed"));
    }
  }
  lock.unlock();
  finish();
  return true;
}

void ProxiedAnswer::abandon() {
  if (call_) call_->cancel();
  finish();
}

void ProxiedAnswer::finish() {
  std::function<void()> on_finish;
  {
    std::lock_guard lock(mutex_);
    on_finish = std::move(on_finish_);
    on_finish_ = nullptr;
  }
  if (on_finish) on_finish();
}

}  // namespace deepinfer::server

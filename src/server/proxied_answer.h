#pragma once
// An engine rank's answer passed through the data-parallel front: a ResponseProducer fed by an
// upstream exchange (upstream_client.h). A request that asked for a stream waits for the rank's
// status line (a refused stream is the rank's 4xx, not a 200 event stream); any other answer is
// whole when the rank's body is. A rank lost mid-answer becomes the endpoint's error: a 502
// object before anything was sent, an error event in the endpoint's stream format after.
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "server/http_message.h"
#include "server/upstream_client.h"

namespace deepinfer::server {

class ProxiedAnswer final : public ResponseProducer, public std::enable_shared_from_this<ProxiedAnswer> {
 public:
  // `path`: the request's (error shapes follow it); `stream_requested`: its body asked for a
  // stream; `rank`: for messages; `on_finish` runs once, when the answer is complete or abandoned.
  ProxiedAnswer(std::string path, bool stream_requested, int rank, std::function<void()> on_finish);
  ~ProxiedAnswer() override;

  // The observer to start the upstream exchange with, and the exchange it started.
  UpstreamObserver observer();
  void attach(std::shared_ptr<UpstreamCall> call);

  bool head_ready() const override;
  bool streaming() const override;
  void set_wakeup(std::function<void()> wakeup) override;
  bool pump(std::string& out, HttpResponse& response) override;
  void abandon() override;

 private:
  void wake();
  void finish();
  std::string stream_error_frame(const std::string& message) const;

  const std::string path_;
  const bool stream_requested_;
  const int rank_;
  std::function<void()> on_finish_;
  std::shared_ptr<UpstreamCall> call_;

  mutable std::mutex mutex_;
  std::function<void()> wakeup_;
  std::optional<UpstreamHead> head_;
  std::string pending_;
  bool ended_ = false;
  std::string error_;
};

}  // namespace deepinfer::server

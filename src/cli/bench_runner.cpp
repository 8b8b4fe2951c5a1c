#include "cli/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/bench_arrivals.h"
#include "cli/bench_stream.h"
#include "core/error.h"

namespace deepinfer::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Arrival times draw from their own stream so that changing the rate leaves the prompts unchanged.
constexpr uint64_t kArrivalSeedSalt = 0x9e3779b97f4a7c15ULL;
constexpr std::size_t kMaxErrorBody = 2000;

void configure(httplib::Client& client, const ServerTarget& target) {
  const auto timeout = std::chrono::duration<double>(target.timeout_s);
  client.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(std::min(timeout, std::chrono::duration<double>(30))));
  client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  client.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  if (!target.api_key.empty()) client.set_bearer_token_auth(target.api_key);
}

// An OpenAI error body's message, or the body itself.
std::string error_message(const std::string& body) {
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("error")) {
    const auto& error = parsed["error"];
    if (error.is_object() && error.contains("message") && error["message"].is_string())
      return error["message"].get<std::string>();
    if (error.is_string()) return error.get<std::string>();
  }
  return body;
}

RequestResult send_request(httplib::Client& client, const std::string& path, const std::string& body,
                           Endpoint endpoint, Clock::time_point run_start) {
  StreamMeter meter(endpoint);
  int status = 0;
  std::string error_body;
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body;
  request.set_header("Content-Type", "application/json");
  request.set_header("Accept", "text/event-stream");
  const Clock::time_point sent = Clock::now();
  request.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, std::size_t size, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, std::min(size, kMaxErrorBody - std::min(kMaxErrorBody, error_body.size())));
      return true;
    }
    return meter.receive(std::string_view(data, size), seconds_between(sent, Clock::now()));
  };
  const httplib::Result response = client.send(request);
  RequestResult result = meter.finish(seconds_between(sent, Clock::now()));
  result.start_s = seconds_between(run_start, sent);
  if (!response && response.error() != httplib::Error::Canceled) {
    result.ok = false;
    result.error = "request failed: " + httplib::to_string(response.error());
  } else if (status != 200 && status != 0) {
    result.ok = false;
    result.error = "HTTP " + std::to_string(status) + ": " + error_message(error_body);
  }
  return result;
}

std::vector<RequestResult> run_conversation(Conversation conversation, const RunOptions& options,
                                            const BaseUrl& url, Clock::time_point run_start) {
  std::vector<RequestResult> results;
  httplib::Client client(url.origin);
  configure(client, options.target);
  client.set_keep_alive(true);
  const std::string path = url.prefix + std::string(endpoint_path(options.endpoint));
  while (true) {
    const std::string body = request_body(conversation, options.endpoint, options.model, options.ignore_eos, options.response_format)
                                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    RequestResult result = send_request(client, path, body, options.endpoint, run_start);
    const bool go_on = result.ok && conversation.has_next_turn();
    if (go_on) advance_turn(conversation, options.endpoint, result.reply);
    result.reply.clear();
    results.push_back(std::move(result));
    if (!go_on) break;
  }
  return results;
}

}  // namespace

BaseUrl split_base_url(std::string_view url) {
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos || (url.substr(0, scheme_end) != "http" && url.substr(0, scheme_end) != "https"))
    fail("base URL '", url, "' must start with http:// or https://");
  const auto path_start = url.find('/', scheme_end + 3);
  BaseUrl out{std::string(url.substr(0, path_start)), ""};
  if (out.origin.size() == scheme_end + 3) fail("base URL '", url, "' names no host");
  if (path_start != std::string_view::npos) {
    std::string_view prefix = url.substr(path_start);
    while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
    out.prefix = prefix;
  }
  return out;
}

std::string first_served_model(const ServerTarget& target) {
  const BaseUrl url = split_base_url(target.base_url);
  httplib::Client client(url.origin);
  configure(client, target);
  const std::string path = url.prefix + "/v1/models";
  const httplib::Result response = client.Get(path);
  if (!response) fail("GET ", target.base_url, path.substr(url.prefix.size()), ": ", httplib::to_string(response.error()));
  if (response->status != 200)
    fail("GET ", path, ": HTTP ", response->status, ": ", error_message(response->body));
  const nlohmann::json listing = nlohmann::json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!listing.is_object() || !listing.contains("data") || !listing["data"].is_array() || listing["data"].empty() ||
      !listing["data"][0].is_object() || !listing["data"][0].contains("id") || !listing["data"][0]["id"].is_string())
    fail("GET ", path, ": no model listed; pass --model");
  return listing["data"][0]["id"].get<std::string>();
}

RunOutcome run_benchmark(std::vector<Conversation> conversations, const RunOptions& options) {
  const BaseUrl url = split_base_url(options.target.base_url);
  const std::size_t count = conversations.size();
  const std::vector<double> offsets = poisson_arrival_offsets(count, options.request_rate, options.seed ^ kArrivalSeedSalt);
  const std::size_t limit = options.max_concurrency > 0 ? options.max_concurrency : std::max<std::size_t>(count, 1);

  std::vector<std::vector<RequestResult>> per_conversation(count);
  std::mutex mutex;
  std::condition_variable slot_freed;
  std::size_t in_flight = 0;
  std::vector<std::thread> threads;
  threads.reserve(count);
  const Clock::time_point start = Clock::now();
  for (std::size_t i = 0; i < count; ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(offsets[i])));
    {
      std::unique_lock lock(mutex);
      slot_freed.wait(lock, [&] { return in_flight < limit; });
      ++in_flight;
    }
    threads.emplace_back([&, i] {
      try {
        per_conversation[i] = run_conversation(std::move(conversations[i]), options, url, start);
      } catch (const std::exception& e) {
        RequestResult failed;
        failed.error = std::string("client error: ") + e.what();
        per_conversation[i].push_back(std::move(failed));
      }
      {
        std::lock_guard lock(mutex);
        --in_flight;
      }
      slot_freed.notify_all();
    });
  }
  for (auto& thread : threads) thread.join();

  RunOutcome outcome;
  outcome.duration_s = seconds_between(start, Clock::now());
  for (auto& results : per_conversation)
    for (auto& result : results) outcome.results.push_back(std::move(result));
  return outcome;
}

}  // namespace deepinfer::cli::bench

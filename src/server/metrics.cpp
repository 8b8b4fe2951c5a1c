#include "server/metrics.h"

#include <cstdio>

namespace deepinfer::server {
namespace {

std::string number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
  int64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + number(bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + number(sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : time_to_first_token_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                            20.0, 40.0, 80.0}),
      time_per_output_token_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}),
      latency_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
                960.0}) {}

void Metrics::record(const RequestRecord& record) {
  std::lock_guard lock(mutex_);
  ++requests_[{record.endpoint, record.status}];
  prompt_tokens_ += record.prompt_tokens;
  generation_tokens_ += record.completion_tokens;
  if (record.time_to_first_token >= 0) time_to_first_token_.observe(record.time_to_first_token);
  if (record.time_per_output_token >= 0) time_per_output_token_.observe(record.time_per_output_token);
  latency_.observe(record.latency);
}

std::string Metrics::render(const engine::EngineStats& engine, const std::string& model_name,
                            const ListenerStats& connections, const std::optional<model::DeviceTime>& device) const {
  const std::string label = "model_name=\"" + model_name + "\"";
  std::string out;
  auto counter = [&](const std::string& name, const char* help, int64_t value) {
    header(out, name, "counter", help);
    out += name + "{" + label + "} " + std::to_string(value) + "\n";
  };
  auto gauge = [&](const std::string& name, const char* help, double value) {
    header(out, name, "gauge", help);
    out += name + "{" + label + "} " + number(value) + "\n";
  };
  std::lock_guard lock(mutex_);
  header(out, "deepinfer:requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [key, count] : requests_)
    out += "deepinfer:requests_total{" + label + ",endpoint=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  counter("deepinfer:prompt_tokens_total", "Prompt tokens of answered requests.", prompt_tokens_);
  counter("deepinfer:generation_tokens_total", "Tokens generated for answered requests.", generation_tokens_);
  counter("deepinfer:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          engine.prefix_queried_tokens);
  counter("deepinfer:prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", engine.prefix_hit_tokens);
  counter("deepinfer:num_preemptions_total", "Sequences preempted for cache memory.", engine.preemptions);
  counter("deepinfer:jump_forward_tokens_total",
          "Generated tokens a constrained answer's grammar forced, appended without a draw (jump-forward).",
          engine.forced_tokens);
  counter("deepinfer:num_failed_steps_total",
          "Engine steps whose compute failed (a device out of memory); their requests ended with the error.",
          engine.failed_steps);
  counter("deepinfer:engine_steps_total", "Engine steps computed.", engine.steps);
  counter("deepinfer:engine_chained_steps_total",
          "Engine steps issued while the step before them computed (overlap scheduling).", engine.chained_steps);
  if (engine.speculative != engine::SpeculativeMode::off) {
    const engine::SpeculationCounters& speculation = engine.speculation;
    counter("deepinfer:spec_decode_num_drafts_total", "Speculative verifications with at least one draft token.",
            speculation.rounds);
    counter("deepinfer:spec_decode_num_draft_tokens_total", "Draft tokens verified by the target.",
            speculation.draft_tokens);
    counter("deepinfer:spec_decode_num_accepted_tokens_total", "Verified draft tokens the target kept.",
            speculation.accepted_tokens);
    counter("deepinfer:spec_decode_num_proposed_tokens_total",
            "Draft tokens the drafter proposed (verified or not: scheduled verification skips some).",
            speculation.drafted_tokens);
    counter("deepinfer:spec_decode_num_rollbacks_total",
            "Verifications that rejected a draft and rolled the sequence's state back.", speculation.rollbacks);
    const auto per_position = [&](const std::string& name, const char* help, const std::vector<int64_t>& values) {
      header(out, name, "counter", help);
      for (std::size_t k = 0; k < values.size(); ++k)
        out += name + "{" + label + ",position=\"" + std::to_string(k) + "\"} " + std::to_string(values[k]) + "\n";
    };
    per_position("deepinfer:spec_decode_num_draft_tokens_per_pos_total", "Draft tokens verified, by draft position.",
                 speculation.verified_by_position);
    if (engine.speculative == engine::SpeculativeMode::scheduled) {
      gauge("deepinfer:spec_decode_drafting",
            "1 while the engine drafts (scheduled mode drafts only while that measures faster than not).",
            engine.drafting ? 1.0 : 0.0);
      counter("deepinfer:spec_decode_mode_switches_total", "Times scheduled mode turned drafting on or off.",
              engine.drafting_switches);
      gauge("deepinfer:spec_decode_drafting_tokens_per_second",
            "Output tokens/s last measured with drafting (scheduled mode's governor).", engine.drafting_rate);
      gauge("deepinfer:spec_decode_plain_tokens_per_second",
            "Output tokens/s last measured without drafting (scheduled mode's governor).", engine.plain_rate);
    }
    per_position("deepinfer:spec_decode_num_accepted_tokens_per_pos_total", "Draft tokens kept, by draft position.",
                 speculation.accepted_by_position);
  }
  auto seconds = [&](const std::string& name, const char* help, double value) {
    header(out, name, "counter", help);
    out += name + "{" + label + "} " + number(value) + "\n";
  };
  seconds("deepinfer:engine_host_seconds_total",
          "Engine thread time with no step issued (finishing, planning, issuing): what the device waits for.",
          engine.schedule_seconds);
  seconds("deepinfer:engine_wait_seconds_total", "Engine thread time waiting for a step's results.",
          engine.compute_seconds);
  if (device) {
    seconds("deepinfer:device_busy_seconds_total",
            "Device time from each forward pass's first queued work to its last, over finished passes.",
            device->busy_seconds);
    seconds("deepinfer:device_gap_seconds_total",
            "Device time between one forward pass's end and the next one's start (nothing queued).",
            device->gap_seconds);
    counter("deepinfer:device_passes_total", "Forward passes the device has finished.", device->passes);
  }
  gauge("deepinfer:num_requests_running", "Sequences in the running batch.", static_cast<double>(engine.running));
  gauge("deepinfer:num_requests_waiting", "Sequences waiting to be scheduled.", static_cast<double>(engine.waiting));
  gauge("deepinfer:kv_cache_usage_perc", "Fraction of cache blocks not free (in use or held by the prefix cache).",
        engine.total_blocks > 0
            ? static_cast<double>(engine.total_blocks - engine.free_blocks) / static_cast<double>(engine.total_blocks)
            : 0.0);
  // Blocks held by sequences only (the prefix cache's evictable blocks and its snapshots
  // excluded): back to 0 whenever the server is idle, so a leak shows.
  gauge("deepinfer:kv_cache_blocks_in_use", "Cache blocks held by running or waiting sequences.",
        static_cast<double>(engine.in_use_blocks - engine.snapshot_blocks));
  gauge("deepinfer:kv_cache_snapshot_blocks", "Cache blocks holding the prefix cache's state snapshots.",
        static_cast<double>(engine.snapshot_blocks));
  gauge("deepinfer:kv_cache_blocks_total", "Cache blocks the cache memory holds.", static_cast<double>(engine.total_blocks));
  gauge("deepinfer:http_connections_open", "Open HTTP connections.", static_cast<double>(connections.open_connections));
  counter("deepinfer:http_connections_refused_total", "Connections answered 503 and closed: past --max-connections.",
          connections.refused_total);
  counter("deepinfer:http_timeouts_total", "Connections whose request head, body or a write passed its deadline.",
          connections.timeouts_total);
  counter("deepinfer:http_client_gone_total", "Requests abandoned because their client left before the answer ended.",
          connections.client_gone_total);
  header(out, "deepinfer:time_to_first_token_seconds", "histogram", "From request arrival to the first token.");
  time_to_first_token_.render("deepinfer:time_to_first_token_seconds", out);
  header(out, "deepinfer:time_per_output_token_seconds", "histogram", "Mean time between generated tokens.");
  time_per_output_token_.render("deepinfer:time_per_output_token_seconds", out);
  header(out, "deepinfer:e2e_request_latency_seconds", "histogram", "From request arrival to the last byte.");
  latency_.render("deepinfer:e2e_request_latency_seconds", out);
  return out;
}

}  // namespace deepinfer::server

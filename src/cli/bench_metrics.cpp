#include "cli/bench_metrics.h"

#include <charconv>
#include <string>

#include <httplib.h>

namespace deepinfer::cli::bench {
namespace {

// A sample line's value, or nullopt when it is not a whole number.
std::optional<int64_t> sample_value(std::string_view line) {
  const auto space = line.rfind(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::string_view text = line.substr(space + 1);
  double value = 0;  // counters print as integers, but a float exposition is read too
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return static_cast<int64_t>(value);
}

// The position label's value of a per-position sample, or -1.
int64_t position_label(std::string_view line) {
  constexpr std::string_view kLabel = "position=\"";
  const auto at = line.find(kLabel);
  if (at == std::string_view::npos) return -1;
  int64_t position = -1;
  const char* begin = line.data() + at + kLabel.size();
  const auto [end, error] = std::from_chars(begin, line.data() + line.size(), position);
  return error == std::errc() && end < line.data() + line.size() && *end == '"' ? position : -1;
}

void put(std::vector<int64_t>& values, int64_t position, int64_t value) {
  if (position < 0 || position > 1024) return;
  if (values.size() <= static_cast<std::size_t>(position)) values.resize(static_cast<std::size_t>(position) + 1, 0);
  values[static_cast<std::size_t>(position)] = value;
}

}  // namespace

std::optional<SpeculationScrape> parse_speculation_metrics(std::string_view exposition) {
  SpeculationScrape out;
  bool found = false;
  while (!exposition.empty()) {
    const auto newline = exposition.find('\n');
    const std::string_view line = exposition.substr(0, newline);
    exposition = newline == std::string_view::npos ? std::string_view{} : exposition.substr(newline + 1);
    if (line.empty() || line.front() == '#') continue;
    const std::string_view name = line.substr(0, line.find_first_of("{ "));
    const std::optional<int64_t> value = sample_value(line);
    if (!value) continue;
    if (name == "deepinfer:engine_steps_total") out.steps = *value;
    else if (name == "deepinfer:spec_decode_num_drafts_total") out.drafts = *value, found = true;
    else if (name == "deepinfer:spec_decode_num_draft_tokens_total") out.draft_tokens = *value;
    else if (name == "deepinfer:spec_decode_num_accepted_tokens_total") out.accepted_tokens = *value;
    else if (name == "deepinfer:spec_decode_num_proposed_tokens_total") out.proposed_tokens = *value;
    else if (name == "deepinfer:spec_decode_num_draft_tokens_per_pos_total")
      put(out.verified_by_position, position_label(line), *value);
    else if (name == "deepinfer:spec_decode_num_accepted_tokens_per_pos_total")
      put(out.accepted_by_position, position_label(line), *value);
  }
  if (!found) return std::nullopt;
  return out;
}

std::optional<SpeculationScrape> scrape_speculation(const ServerTarget& target) {
  const BaseUrl url = split_base_url(target.base_url);
  httplib::Client client(url.origin);
  client.set_connection_timeout(std::chrono::seconds(10));
  client.set_read_timeout(std::chrono::seconds(30));
  if (!target.api_key.empty()) client.set_bearer_token_auth(target.api_key);
  const httplib::Result response = client.Get(url.prefix + "/metrics");
  if (!response || response->status != 200) return std::nullopt;
  return parse_speculation_metrics(response->body);
}

SpeculationScrape speculation_delta(const SpeculationScrape& before, const SpeculationScrape& after) {
  SpeculationScrape out;
  out.steps = after.steps - before.steps;
  out.drafts = after.drafts - before.drafts;
  out.draft_tokens = after.draft_tokens - before.draft_tokens;
  out.accepted_tokens = after.accepted_tokens - before.accepted_tokens;
  out.proposed_tokens = after.proposed_tokens - before.proposed_tokens;
  const auto minus = [](const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    std::vector<int64_t> difference(a);
    for (std::size_t k = 0; k < difference.size() && k < b.size(); ++k) difference[k] -= b[k];
    return difference;
  };
  out.verified_by_position = minus(after.verified_by_position, before.verified_by_position);
  out.accepted_by_position = minus(after.accepted_by_position, before.accepted_by_position);
  return out;
}

}  // namespace deepinfer::cli::bench

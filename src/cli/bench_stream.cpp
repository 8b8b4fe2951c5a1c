#include "cli/bench_stream.h"

#include <nlohmann/json.hpp>

namespace deepinfer::cli::bench {
namespace {

bool non_empty_string(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

int64_t integer_or_zero(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

}  // namespace

bool StreamMeter::receive(std::string_view bytes, double elapsed_s) {
  for (const SseEvent& event : reader_.feed(bytes)) {
    if (!result_.error.empty()) break;
    on_event(event, elapsed_s);
  }
  return result_.error.empty();
}

void StreamMeter::on_event(const SseEvent& event, double elapsed_s) {
  if (done_) return;
  if (is_done_marker(event.data)) {
    done_ = true;
    return;
  }
  const nlohmann::json chunk = nlohmann::json::parse(event.data, nullptr, /*allow_exceptions=*/false);
  if (!chunk.is_object()) {
    result_.error = "malformed stream chunk: " + event.data.substr(0, 200);
    return;
  }
  if (auto error = chunk.find("error"); error != chunk.end()) {
    const bool has_message = error->is_object() && error->contains("message") && (*error)["message"].is_string();
    result_.error = "error in stream: " + (has_message ? (*error)["message"].get<std::string>() : error->dump());
    return;
  }
  if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
    result_.usage_reported = true;
    result_.prompt_tokens = integer_or_zero(*usage, "prompt_tokens");
    result_.output_tokens = integer_or_zero(*usage, "completion_tokens");
    // DeepSeek's field; OpenAI reports the same figure under prompt_tokens_details.
    if (usage->contains("prompt_cache_hit_tokens")) {
      result_.cached_prompt_tokens = integer_or_zero(*usage, "prompt_cache_hit_tokens");
    } else if (auto details = usage->find("prompt_tokens_details"); details != usage->end() && details->is_object()) {
      result_.cached_prompt_tokens = integer_or_zero(*details, "cached_tokens");
    }
  }
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty() || !(*choices)[0].is_object()) return;
  const nlohmann::json& choice = (*choices)[0];
  bool carries_token = false;
  if (endpoint_ == Endpoint::Completions) {
    if (non_empty_string(choice, "text")) {
      carries_token = true;
      result_.reply += choice["text"].get<std::string>();
    }
  } else if (auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) {
    if (non_empty_string(*delta, "content")) {
      carries_token = true;
      result_.reply += (*delta)["content"].get<std::string>();
    }
    if (non_empty_string(*delta, "reasoning_content")) carries_token = true;
    if (auto calls = delta->find("tool_calls"); calls != delta->end() && calls->is_array() && !calls->empty())
      carries_token = true;
  }
  if (!carries_token) return;
  if (result_.token_chunks == 0) {
    result_.ttft_s = elapsed_s;
  } else {
    result_.itl_s.push_back(elapsed_s - last_token_s_);
  }
  last_token_s_ = elapsed_s;
  ++result_.token_chunks;
}

RequestResult StreamMeter::finish(double latency_s) {
  RequestResult out = std::move(result_);
  out.latency_s = latency_s;
  if (out.error.empty() && !done_) out.error = "the stream ended before [DONE]";
  if (out.error.empty() && out.token_chunks == 0) out.error = "the stream carried no token";
  if (out.error.empty() && !out.usage_reported) out.output_tokens = out.token_chunks;
  out.ok = out.error.empty();
  return out;
}

}  // namespace deepinfer::cli::bench

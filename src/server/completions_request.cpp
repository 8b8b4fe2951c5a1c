#include "server/completions_request.h"

#include "api/request_constraint.h"

#include "api/api_error.h"
#include "api/prompt_tokens.h"
#include "api/request_fields.h"
#include "core/error.h"

namespace deepinfer::server {

namespace fields = api::fields;

CompletionsRequest parse_completions_request(const nlohmann::ordered_json& body, const Tokenizer& tokenizer) {
  CompletionsRequest out;
  api::GenerationOptions& options = out.options;
  options.model = fields::string(fields::require(body, "model", ""), "model");
  const nlohmann::ordered_json& prompt = fields::require(body, "prompt", "");
  out.prompt = api::encode_completion_prompt(prompt, tokenizer);
  if (prompt.is_string()) {
    out.prompt_text = prompt.get<std::string>();
  } else {
    try {
      out.prompt_text = tokenizer.decode(out.prompt);
    } catch (const Error& error) {
      api::reject(std::string("prompt: ") + error.what(), "prompt");
    }
  }
  if (const auto* suffix = fields::find(body, "suffix"); suffix && !fields::string(*suffix, "suffix").empty())
    api::reject("suffix is not supported", "suffix");

  // vLLM's structured outputs on /v1/completions: response_format, structured_outputs, regex, ebnf.
  if (const auto* format = fields::find(body, "response_format"))
    api::read_response_format(*format, "response_format", options.constraint);
  api::read_engine_constraints(body, options.constraint);

  out.echo = fields::optional_bool(body, "echo").value_or(false);
  if (auto max_tokens = fields::optional_integer(body, "max_tokens")) {
    out.echo_only = out.echo && *max_tokens == 0;
    if (!out.echo_only) fields::check_max_tokens(*max_tokens);
    options.max_tokens = out.echo_only ? 1 : *max_tokens;
  }
  engine::SamplingParams& sampling = options.sampling;
  if (auto t = fields::optional_number(body, "temperature")) {
    fields::check_range(*t, 0, 2, "temperature");
    sampling.temperature = static_cast<float>(*t);
  }
  if (auto p = fields::optional_number(body, "top_p")) {
    fields::check_range(*p, 0, 1, "top_p");
    if (*p == 0) sampling.temperature = 0.0f;  // as the chat adapter: top_p 0 means greedy
    sampling.top_p = *p == 0 ? 1.0f : static_cast<float>(*p);
  }
  if (auto k = fields::optional_integer(body, "top_k")) sampling.top_k = static_cast<int32_t>(std::max<int64_t>(-1, std::min<int64_t>(*k, INT32_MAX)));
  if (auto m = fields::optional_number(body, "min_p")) {
    fields::check_range(*m, 0, 1, "min_p");
    sampling.min_p = static_cast<float>(*m);
  }
  if (auto f = fields::optional_number(body, "frequency_penalty")) {
    fields::check_range(*f, -2, 2, "frequency_penalty");
    sampling.frequency_penalty = static_cast<float>(*f);
  }
  if (auto p = fields::optional_number(body, "presence_penalty")) {
    fields::check_range(*p, -2, 2, "presence_penalty");
    sampling.presence_penalty = static_cast<float>(*p);
  }
  if (auto r = fields::optional_number(body, "repetition_penalty")) {
    if (!(*r > 0) || *r > 100) api::reject("repetition_penalty must be in (0, 100]", "repetition_penalty");
    sampling.repetition_penalty = static_cast<float>(*r);
  }
  if (auto seed = fields::optional_integer(body, "seed")) {
    if (*seed < 0) api::reject("seed must be a non-negative integer", "seed");
    sampling.seed = static_cast<uint64_t>(*seed);
  }
  if (auto n = fields::optional_integer(body, "n")) {
    if (*n < 1 || *n > 128) api::reject("n must be in [1, 128]", "n");
    sampling.n = static_cast<int32_t>(*n);
  }
  if (auto best_of = fields::optional_integer(body, "best_of"); best_of && *best_of != sampling.n)
    api::reject("best_of is not supported (it must equal n)", "best_of");
  if (auto logprobs = fields::optional_integer(body, "logprobs")) {
    if (*logprobs < 0 || *logprobs > engine::kMaxLogprobs)
      api::reject("logprobs must be in [0, " + std::to_string(engine::kMaxLogprobs) + "]", "logprobs");
    sampling.logprobs = static_cast<int32_t>(*logprobs);
  }
  if (const auto* bias = fields::find(body, "logit_bias")) {
    for (const auto& [key, value] : fields::object(*bias, "logit_bias").items()) {
      int64_t id = -1;
      try {
        std::size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (const std::exception&) {
      }
      if (id < 0 || id > INT32_MAX) api::reject("logit_bias: key '" + key + "' is not a token id", "logit_bias");
      const double b = fields::number(value, "logit_bias." + key);
      fields::check_range(b, -100, 100, "logit_bias." + key);
      sampling.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(b);
    }
  }
  if (out.echo) sampling.prompt_logprobs = sampling.logprobs;
  options.ignore_eos = fields::optional_bool(body, "ignore_eos").value_or(false);
  if (const auto* stop = fields::find(body, "stop")) {
    if (stop->is_string()) {
      options.stop.push_back(stop->get<std::string>());
    } else {
      const auto& list = fields::array(*stop, "stop");
      if (list.size() > 16) api::reject("stop: at most 16 strings", "stop");
      for (std::size_t k = 0; k < list.size(); ++k)
        options.stop.push_back(fields::string(list[k], "stop[" + std::to_string(k) + "]"));
    }
  }
  options.stream = fields::optional_bool(body, "stream").value_or(false);
  if (const auto* stream_options = fields::find(body, "stream_options")) {
    if (!options.stream) api::reject("stream_options should be set along with stream = true", "stream_options");
    if (const auto* usage = fields::find(fields::object(*stream_options, "stream_options"), "include_usage"))
      options.include_usage = fields::boolean(*usage, "stream_options.include_usage");
  }
  return out;
}

}  // namespace deepinfer::server

// `deepinfer bench`: a serving benchmark client for OpenAI-compatible servers, in the manner of
// `vllm bench serve`. It streams every request and reports TTFT, TPOT, ITL, end-to-end latency,
// throughput, the prefix-cache hit rate and, from the server's /metrics, speculative decoding's
// acceptance; the pieces live in cli/bench_*.h.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/bench_metrics.h"
#include "cli/bench_prompts.h"
#include "cli/bench_runner.h"
#include "cli/bench_stats.h"
#include "cli/commands.h"
#include "core/error.h"

namespace deepinfer::cli {
namespace {

using namespace bench;

constexpr const char* kBenchUsage =
    "usage: deepinfer bench [options]\n"
    "\n"
    "Sends streaming requests to an OpenAI-compatible server (deepinfer serve, vLLM, ...) and\n"
    "reports time to first token, time per output token, inter-token latency (mean, p50, p90,\n"
    "p99), end-to-end latency, throughput and the prefix-cache hit rate; with a server that\n"
    "publishes deepinfer:spec_decode_* metrics, speculative decoding's acceptance over the run.\n"
    "\n"
    "server:\n"
    "  --base-url URL        http(s)://host:port[/prefix] (default http://HOST:PORT)\n"
    "  --host HOST           default 127.0.0.1\n"
    "  --port PORT           default 8000\n"
    "  --endpoint E          completions (default) or chat\n"
    "  --model NAME          default: the first model GET /v1/models lists\n"
    "  --api-key KEY         sent as a bearer token\n"
    "  --timeout S           seconds to wait for a response to start or go on (default 600)\n"
    "load:\n"
    "  --num-prompts N       conversations to send (default 100; with --dataset, its line count)\n"
    "  --request-rate R      conversations started per second, Poisson arrivals; inf (default) sends\n"
    "                        all at once\n"
    "  --max-concurrency N   at most N conversations in flight (default: no limit)\n"
    "  --multi-turn N        N turns per conversation; each turn resends the whole history (earlier\n"
    "                        prompts, the model's replies) with a new user message of --input-len words\n"
    "prompts:\n"
    "  --dataset FILE        JSONL, one object a line: {\"prompt\": text or token ids} or\n"
    "                        {\"messages\": [...]} (chat), optional \"max_tokens\"; cycled to --num-prompts\n"
    "  --input-len N         synthetic prompt length in words or token ids (default 256)\n"
    "  --output-len N        max_tokens of each request (default 64)\n"
    "  --prefix-len N        the first N words or ids are the same in every synthetic prompt (default 0)\n"
    "  --prompt-kind K       words or ids; ids (exact lengths) need --endpoint completions and one turn.\n"
    "                        Default: ids for single-turn completions, words otherwise\n"
    "  --token-id-end N      synthetic ids are drawn from [3, N) (default 500, fits the test models)\n"
    "  --seed S              prompts and arrival times (default 0)\n"
    "  --no-ignore-eos       let requests stop at EOS (by default they ask for ignore_eos: true)\n"
    "  --response-format FILE\n"
    "                        a JSON object sent as each request's response_format (structured\n"
    "                        output), e.g. {\"type\": \"json_schema\", \"json_schema\": {\"name\", \"schema\"}}\n"
    "output:\n"
    "  --json                print one JSON object instead of the table\n"
    "\n"
    "exit codes: 0 done (failed requests are counted in the report), 1 the server could not be asked\n"
    "or no request succeeded, or the dataset is bad, 2 bad command line\n";

nlohmann::json distribution_json(const Distribution& d) {
  if (d.count == 0) return nullptr;
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"max", d.max}};
}

void print_distribution(const char* title, const char* name, const Distribution& d) {
  std::printf("%s\n", title);
  if (d.count == 0) {
    std::printf("  (no samples)\n");
    return;
  }
  std::printf("%-40s %10.2f\n", (std::string("Mean ") + name + " (ms):").c_str(), d.mean);
  std::printf("%-40s %10.2f\n", (std::string("P50 ") + name + " (ms):").c_str(), d.p50);
  std::printf("%-40s %10.2f\n", (std::string("P90 ") + name + " (ms):").c_str(), d.p90);
  std::printf("%-40s %10.2f\n", (std::string("P99 ") + name + " (ms):").c_str(), d.p99);
}

double ratio(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : std::numeric_limits<double>::quiet_NaN();
}

// vLLM's definitions: acceptance length = 1 + accepted / verifications (the bonus token counted).
void print_speculation(const SpeculationScrape& s) {
  std::printf("---------------Speculative Decoding---------------\n");
  std::printf("%-40s %10.2f\n", "Acceptance rate (%):", ratio(s.accepted_tokens, s.draft_tokens) * 100);
  std::printf("%-40s %10.2f\n", "Acceptance length:", 1.0 + ratio(s.accepted_tokens, s.drafts));
  std::printf("%-40s %10lld\n", "Drafts:", static_cast<long long>(s.drafts));
  std::printf("%-40s %10lld\n", "Draft tokens verified:", static_cast<long long>(s.draft_tokens));
  std::printf("%-40s %10lld\n", "Draft tokens proposed:", static_cast<long long>(s.proposed_tokens));
  std::printf("%-40s %10lld\n", "Accepted tokens:", static_cast<long long>(s.accepted_tokens));
  std::printf("%-40s %10.2f\n", "Draft tokens verified per step:", ratio(s.draft_tokens, s.steps));
  std::printf("Per-position acceptance rate (%%):");
  for (std::size_t k = 0; k < s.verified_by_position.size(); ++k)
    std::printf(" %.1f", ratio(k < s.accepted_by_position.size() ? s.accepted_by_position[k] : 0, s.verified_by_position[k]) * 100);
  std::printf("\n");
}

nlohmann::json speculation_json(const SpeculationScrape& s) {
  const auto number_or_null = [](double value) { return std::isnan(value) ? nlohmann::json(nullptr) : nlohmann::json(value); };
  nlohmann::json per_position = nlohmann::json::array();
  for (std::size_t k = 0; k < s.verified_by_position.size(); ++k)
    per_position.push_back(number_or_null(ratio(k < s.accepted_by_position.size() ? s.accepted_by_position[k] : 0,
                                                 s.verified_by_position[k])));
  return {{"drafts", s.drafts},
          {"draft_tokens", s.draft_tokens},
          {"proposed_tokens", s.proposed_tokens},
          {"accepted_tokens", s.accepted_tokens},
          {"steps", s.steps},
          {"acceptance_rate", number_or_null(ratio(s.accepted_tokens, s.draft_tokens))},
          {"acceptance_length", number_or_null(1.0 + ratio(s.accepted_tokens, s.drafts))},
          {"draft_tokens_per_step", number_or_null(ratio(s.draft_tokens, s.steps))},
          {"acceptance_rate_per_position", per_position},
          {"verified_per_position", s.verified_by_position},
          {"accepted_per_position", s.accepted_by_position}};
}

void print_table(const RunSummary& s, const std::string& model, std::size_t conversations, int64_t turns) {
  std::printf("============ Serving Benchmark Result ============\n");
  std::printf("%-40s %10s\n", "Model:", model.c_str());
  std::printf("%-40s %10zu\n", "Conversations:", conversations);
  std::printf("%-40s %10lld\n", "Turns per conversation:", static_cast<long long>(turns));
  std::printf("%-40s %10lld\n", "Successful requests:", static_cast<long long>(s.completed));
  std::printf("%-40s %10lld\n", "Failed requests:", static_cast<long long>(s.failed));
  std::printf("%-40s %10.2f\n", "Benchmark duration (s):", s.duration_s);
  std::printf("%-40s %10lld\n", "Total input tokens:", static_cast<long long>(s.prompt_tokens));
  std::printf("%-40s %10lld\n", "Total generated tokens:", static_cast<long long>(s.output_tokens));
  std::printf("%-40s %10lld\n", "Prefix-cache hit tokens:", static_cast<long long>(s.cached_prompt_tokens));
  if (s.prefix_cache_hit_rate)
    std::printf("%-40s %9.2f%%\n", "Prefix-cache hit rate:", *s.prefix_cache_hit_rate * 100);
  else
    std::printf("%-40s %10s\n", "Prefix-cache hit rate:", "-");
  std::printf("%-40s %10.2f\n", "Request throughput (req/s):", s.request_throughput);
  std::printf("%-40s %10.2f\n", "Output token throughput (tok/s):", s.output_throughput);
  std::printf("%-40s %10.2f\n", "Total token throughput (tok/s):", s.total_token_throughput);
  print_distribution("---------------Time to First Token----------------", "TTFT", s.ttft_ms);
  print_distribution("-----Time per Output Token (excl. 1st token)------", "TPOT", s.tpot_ms);
  print_distribution("---------------Inter-token Latency----------------", "ITL", s.itl_ms);
  print_distribution("----------------End-to-end Latency----------------", "E2EL", s.e2el_ms);
  std::printf("==================================================\n");
}

nlohmann::json summary_json(const RunSummary& s, const RunOptions& run, std::size_t conversations, int64_t turns) {
  nlohmann::json errors = nlohmann::json::array();
  for (const auto& [message, count] : s.errors) errors.push_back({{"message", message}, {"count", count}});
  return {{"model", run.model},
          {"base_url", run.target.base_url},
          {"endpoint", std::string(endpoint_path(run.endpoint))},
          {"conversations", conversations},
          {"turns", turns},
          {"request_rate", std::isinf(run.request_rate) ? nlohmann::json(nullptr) : nlohmann::json(run.request_rate)},
          {"max_concurrency", run.max_concurrency > 0 ? nlohmann::json(run.max_concurrency) : nlohmann::json(nullptr)},
          {"response_format", run.response_format},
          {"completed", s.completed},
          {"failed", s.failed},
          {"errors", errors},
          {"duration_s", s.duration_s},
          {"total_input_tokens", s.prompt_tokens},
          {"total_output_tokens", s.output_tokens},
          {"cached_prompt_tokens", s.cached_prompt_tokens},
          {"requests_without_usage", s.without_usage},
          {"prefix_cache_hit_rate", s.prefix_cache_hit_rate ? nlohmann::json(*s.prefix_cache_hit_rate) : nlohmann::json(nullptr)},
          {"request_throughput", s.request_throughput},
          {"output_throughput", s.output_throughput},
          {"total_token_throughput", s.total_token_throughput},
          {"ttft_ms", distribution_json(s.ttft_ms)},
          {"tpot_ms", distribution_json(s.tpot_ms)},
          {"itl_ms", distribution_json(s.itl_ms)},
          {"e2el_ms", distribution_json(s.e2el_ms)}};
}

}  // namespace

int run_bench(const std::vector<std::string>& argv) {
  try {
    Args args(argv, {"--help", "--json", "--no-ignore-eos"},
              {"--base-url", "--host", "--port", "--endpoint", "--model", "--api-key", "--timeout", "--num-prompts",
               "--request-rate", "--max-concurrency", "--multi-turn", "--dataset", "--input-len", "--output-len",
               "--prefix-len", "--prompt-kind", "--token-id-end", "--seed", "--response-format"});
    if (args.has("--help")) {
      std::fputs(kBenchUsage, stdout);
      return kExitOk;
    }
    if (!args.positionals().empty()) throw UsageError{"unexpected argument " + args.positionals().front()};

    RunOptions run;
    if (auto url = args.get("--base-url")) {
      if (args.get("--host") || args.get("--port")) throw UsageError{"give --base-url or --host/--port, not both"};
      run.target.base_url = *url;
    } else {
      run.target.base_url = "http://" + args.get("--host").value_or("127.0.0.1") + ":" +
                            std::to_string(args.count("--port", 8000));
    }
    const std::string endpoint = args.get("--endpoint").value_or("completions");
    if (endpoint != "completions" && endpoint != "chat") throw UsageError{"--endpoint is completions or chat"};
    run.endpoint = endpoint == "chat" ? Endpoint::Chat : Endpoint::Completions;
    run.target.api_key = args.get("--api-key").value_or("");
    run.target.timeout_s = args.number("--timeout", 600);
    if (!(run.target.timeout_s > 0)) throw UsageError{"--timeout must be positive"};
    run.request_rate = args.number("--request-rate", std::numeric_limits<double>::infinity());
    if (!(run.request_rate > 0)) throw UsageError{"--request-rate must be positive (or inf)"};
    run.max_concurrency = static_cast<std::size_t>(args.count("--max-concurrency", 0));
    if (args.get("--max-concurrency") && run.max_concurrency == 0) throw UsageError{"--max-concurrency must be >= 1"};
    run.seed = static_cast<uint64_t>(args.count("--seed", 0));
    run.ignore_eos = !args.has("--no-ignore-eos");
    if (auto format = args.get("--response-format")) run.response_format = read_response_format(*format);

    PromptOptions prompts;
    prompts.dataset = args.get("--dataset");
    prompts.input_len = args.count("--input-len", prompts.input_len);
    prompts.output_len = args.count("--output-len", prompts.output_len);
    prompts.prefix_len = args.count("--prefix-len", 0);
    prompts.turns = args.count("--multi-turn", 1);
    prompts.token_id_end = static_cast<int32_t>(args.count("--token-id-end", prompts.token_id_end));
    prompts.seed = run.seed;
    if (prompts.input_len < 1 || prompts.output_len < 1) throw UsageError{"--input-len and --output-len must be >= 1"};
    if (prompts.turns < 1) throw UsageError{"--multi-turn must be >= 1"};
    if (prompts.prefix_len > prompts.input_len) throw UsageError{"--prefix-len cannot exceed --input-len"};
    const std::string kind = args.get("--prompt-kind").value_or(
        run.endpoint == Endpoint::Completions && prompts.turns == 1 ? "ids" : "words");
    if (kind != "words" && kind != "ids") throw UsageError{"--prompt-kind is words or ids"};
    prompts.kind = kind == "ids" ? PromptKind::TokenIds : PromptKind::Words;
    if (args.get("--num-prompts")) {
      prompts.count = static_cast<std::size_t>(args.count("--num-prompts", 0));
      if (prompts.count == 0) throw UsageError{"--num-prompts must be >= 1"};
    } else if (prompts.dataset) {
      prompts.count = 0;  // one conversation per dataset line
    }
    std::vector<Conversation> conversations = make_conversations(prompts, run.endpoint);

    run.model = args.get("--model").value_or("");
    if (run.model.empty()) run.model = first_served_model(run.target);
    const std::size_t conversation_count = conversations.size();
    if (!args.has("--json"))
      std::fprintf(stderr, "deepinfer bench: %zu conversation(s) x %lld turn(s) to %s%s, model %s\n", conversation_count,
                   static_cast<long long>(prompts.turns), run.target.base_url.c_str(),
                   std::string(endpoint_path(run.endpoint)).c_str(), run.model.c_str());
    const std::optional<SpeculationScrape> speculation_before = scrape_speculation(run.target);
    const RunOutcome outcome = run_benchmark(std::move(conversations), run);
    const RunSummary summary = summarize(outcome.results, outcome.duration_s);
    std::optional<SpeculationScrape> speculation;
    if (speculation_before)
      if (const std::optional<SpeculationScrape> after = scrape_speculation(run.target))
        speculation = speculation_delta(*speculation_before, *after);

    if (args.has("--json")) {
      nlohmann::json json = summary_json(summary, run, conversation_count, prompts.turns);
      json["speculative_decoding"] = speculation ? speculation_json(*speculation) : nlohmann::json(nullptr);
      std::cout << json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      print_table(summary, run.model, conversation_count, prompts.turns);
      if (speculation) print_speculation(*speculation);
      for (const auto& [message, count] : summary.errors)
        std::fprintf(stderr, "failed x%lld: %s\n", static_cast<long long>(count), message.c_str());
      if (summary.without_usage > 0)
        std::fprintf(stderr, "note: %lld response(s) had no usage block; their output tokens are counted as chunks\n",
                     static_cast<long long>(summary.without_usage));
    }
    if (summary.completed == 0) {
      std::fprintf(stderr, "deepinfer bench: no request succeeded\n");
      return kExitFailure;
    }
    return kExitOk;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepinfer bench: %s\n\n%s", e.message.c_str(), kBenchUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer bench: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli

// The serving engine on the CPU with the V4 benchmark model (tests/support/v4_benchmark_model.h):
//   1. throughput: a closed loop of C clients (C = 1, 8, 32, 128), each submitting a request with a
//      random prompt, greedy, ignore_eos, max_tokens fixed, and resubmitting when it ends; output
//      tokens/s over the whole loop (prefills included), median of repetitions, ratio to C = 1;
//   2. scheduler overhead at the largest C: EngineStats::schedule_seconds (host time no step hid)
//      against schedule + compute seconds;
//   3. a multi-turn chat replay (every turn resends the whole conversation): prefix-cache hits
//      against the tokens that could have been reused;
//   4. cache bytes held per token during the largest-C loop, against Model::cache_layout(B), and
//      the released V4-Flash / V4.1-Flash figures;
//   5. the linear kernel's cost per token at 1, 8 and 32 tokens for the model's main shapes, and
//      Model::forward_batch decode steps of 1 .. 128 sequences without the engine (what batching
//      can gain at most).
//
//   build/bench/engine_bench [--reps 3] [--requests 2] [--prompt 64] [--max-tokens 64]
//                            [--concurrency 1,8,32,128] [--conversations 8] [--turns 6]
//                            [--skip-linear] [--skip-replay]
//
// --requests is per client and repetition (C = 1 runs max(requests, 4) so its time is not one
// request's). Figures and their reading: docs/BENCHMARKS.md, "Serving engine".
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "io/model_config.h"
#include "kernels/kernels.h"
#include "model/cache_layout.h"
#include "model/model.h"
#include "support/scratch_dir.h"
#include "support/v4_benchmark_model.h"

namespace {

using deepinfer::engine::Engine;
using deepinfer::engine::EngineOptions;
using deepinfer::engine::EngineStats;
using deepinfer::engine::FinishReason;
using deepinfer::engine::GenerationRequest;
using deepinfer::model::Model;
using Clock = std::chrono::steady_clock;

struct Options {
  int reps = 3;
  int requests = 2;
  int64_t prompt = 64;
  int64_t max_tokens = 64;
  std::vector<int> concurrency = {1, 8, 32, 128};
  int conversations = 8;
  int turns = 6;
  int64_t user_tokens = 40;
  int64_t reply_tokens = 32;
  int64_t system_tokens = 64;
  bool linear = true;
  bool replay = true;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) deepinfer::fail(arg, " needs a value");
      return argv[++i];
    };
    if (arg == "--reps") options.reps = std::stoi(value());
    else if (arg == "--requests") options.requests = std::stoi(value());
    else if (arg == "--prompt") options.prompt = std::stoll(value());
    else if (arg == "--max-tokens") options.max_tokens = std::stoll(value());
    else if (arg == "--conversations") options.conversations = std::stoi(value());
    else if (arg == "--turns") options.turns = std::stoi(value());
    else if (arg == "--skip-linear") options.linear = false;
    else if (arg == "--skip-replay") options.replay = false;
    else if (arg == "--concurrency") {
      options.concurrency.clear();
      std::stringstream list(value());
      for (std::string item; std::getline(list, item, ',');) options.concurrency.push_back(std::stoi(item));
    } else {
      deepinfer::fail("unknown argument ", arg, " (see the comment at the top of bench/engine_bench.cpp)");
    }
  }
  if (options.reps < 1 || options.requests < 1 || options.prompt < 1 || options.max_tokens < 1)
    deepinfer::fail("--reps, --requests, --prompt and --max-tokens must be at least 1");
  return options;
}

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int64_t count, int64_t vocab) {
  std::uniform_int_distribution<int32_t> id(3, static_cast<int32_t>(vocab - 1));  // clear of special ids
  std::vector<int32_t> out(static_cast<std::size_t>(count));
  for (int32_t& token : out) token = id(rng);
  return out;
}

GenerationRequest greedy_request(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest request;
  request.prompt = std::move(prompt);
  request.sampling.temperature = 0;
  request.max_tokens = max_tokens;
  request.ignore_eos = true;
  return request;
}

// Submits and reads one request to its end; returns the generated ids. Anything but a full-length
// reply is a failed benchmark.
std::vector<int32_t> run_request(Engine& engine, GenerationRequest request) {
  const int64_t wanted = request.max_tokens;
  const auto stream = engine.submit(std::move(request));
  std::vector<int32_t> generated;
  while (true) {
    const std::optional<deepinfer::engine::StreamEvent> event = stream->next();
    for (const auto& token : event->tokens) generated.push_back(token.token);
    if (!event->finish) continue;
    if (*event->finish != FinishReason::Length || static_cast<int64_t>(generated.size()) != wanted)
      deepinfer::fail("request ended with ", deepinfer::engine::finish_reason_name(*event->finish), " after ",
                      generated.size(), " of ", wanted, " tokens: ", event->error);
    return generated;
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// ---------------------------------------------------------------------------------------------
// Closed loop

struct MemorySample {  // one stats() reading while sequences run
  double paged_bytes_per_token = 0;  // blocks of the running sequences' tables / their tokens
  double held_bytes_per_token = 0;   // the same plus their fixed-state blocks
  int64_t running = 0;
};

struct LoopResult {
  double seconds = 0;
  int64_t output_tokens = 0;
  int64_t requests = 0;
  int64_t steps = 0;
  double schedule_seconds = 0;
  double compute_seconds = 0;
  double planning_seconds = 0;
  std::vector<MemorySample> memory;
};

LoopResult closed_loop(Engine& engine, const Model& model, const Options& options, int clients, int requests_per_client,
                       uint64_t seed) {
  const EngineStats before = engine.stats();
  std::atomic<bool> go{false};
  std::atomic<int64_t> output_tokens{0};
  std::atomic<int> running_clients{clients};
  std::vector<std::thread> threads;
  for (int client = 0; client < clients; ++client)
    threads.emplace_back([&, client] {
      std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(client));
      while (!go.load()) std::this_thread::yield();
      for (int r = 0; r < requests_per_client; ++r) {
        const auto reply =
            run_request(engine, greedy_request(random_tokens(rng, options.prompt, model.vocab_size()), options.max_tokens));
        output_tokens += static_cast<int64_t>(reply.size());
      }
      --running_clients;
    });
  std::vector<MemorySample> memory;
  const Clock::time_point start = Clock::now();
  go = true;
  while (running_clients.load() > 0) {  // sample the cache while the loop runs
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const EngineStats now = engine.stats();
    if (now.running_tokens == 0) continue;
    const int64_t table_blocks = now.in_use_blocks - now.snapshot_blocks - now.running_state_blocks;
    memory.push_back(MemorySample{
        static_cast<double>(table_blocks * now.block_bytes) / static_cast<double>(now.running_tokens),
        static_cast<double>((table_blocks + now.running_state_blocks) * now.block_bytes) /
            static_cast<double>(now.running_tokens),
        now.running});
  }
  for (std::thread& thread : threads) thread.join();
  LoopResult result;
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  engine.drain();  // drain() ends acceptance: callers make a fresh engine per loop
  const EngineStats after = engine.stats();
  result.output_tokens = output_tokens.load();
  result.requests = static_cast<int64_t>(clients) * requests_per_client;
  result.steps = after.steps - before.steps;
  result.schedule_seconds = after.schedule_seconds - before.schedule_seconds;
  result.compute_seconds = after.compute_seconds - before.compute_seconds;
  result.planning_seconds = after.planning_seconds - before.planning_seconds;
  result.memory = std::move(memory);
  return result;
}

void throughput(const Model& model, const Options& options) {
  std::printf("\n== Throughput: closed loop, prompt %lld random tokens, greedy, max_tokens %lld, ignore_eos ==\n",
              static_cast<long long>(options.prompt), static_cast<long long>(options.max_tokens));
  std::printf("%6s %9s %12s %14s %9s %8s %11s %10s %11s %11s %10s\n", "conc", "requests", "tok/s med",
              "tok/s (reps)", "vs C=1", "steps", "tok/step", "ms/step", "host %", "plan ms/st", "wall s");
  double base = 0;
  LoopResult last;
  for (int clients : options.concurrency) {
    const int per_client = clients == 1 ? std::max(options.requests, 4) : options.requests;
    std::vector<double> rates;
    LoopResult kept;
    for (int rep = 0; rep < options.reps; ++rep) {
      Engine engine(model, EngineOptions{});
      LoopResult result = closed_loop(engine, model, options, clients, per_client, static_cast<uint64_t>(rep * 7919 + clients));
      rates.push_back(static_cast<double>(result.output_tokens) / result.seconds);
      if (rep == 0 || rates.back() == median(rates)) kept = std::move(result);
    }
    const double rate = median(rates);
    if (clients == options.concurrency.front()) base = rate;
    std::string all;
    for (double r : rates) all += (all.empty() ? "" : "/") + std::to_string(static_cast<int>(std::lround(r)));
    const double busy = kept.schedule_seconds + kept.compute_seconds;
    std::printf("%6d %9lld %12.1f %14s %8.2fx %8lld %11.2f %10.2f %10.2f%% %11.3f %10.1f\n", clients,
                static_cast<long long>(kept.requests), rate, all.c_str(), rate / base, static_cast<long long>(kept.steps),
                static_cast<double>(kept.output_tokens) / static_cast<double>(kept.steps), 1000 * busy / static_cast<double>(kept.steps),
                100 * kept.schedule_seconds / busy, 1000 * kept.planning_seconds / static_cast<double>(kept.steps), kept.seconds);
    last = std::move(kept);
  }
  const int top = options.concurrency.back();
  const double busy = last.schedule_seconds + last.compute_seconds;
  std::printf("\n== Scheduler overhead at concurrency %d (the repetition with the median rate) ==\n", top);
  std::printf("steps %lld; host time not hidden by a step (schedule_seconds) %.3f s; compute %.3f s; share %.2f%%\n",
              static_cast<long long>(last.steps), last.schedule_seconds, last.compute_seconds, 100 * last.schedule_seconds / busy);
  std::printf("planning (Scheduler::schedule, overlapped with compute) %.3f s = %.3f ms per step; loop busy %.1f%% of wall\n",
              last.planning_seconds, 1000 * last.planning_seconds / static_cast<double>(last.steps), 100 * busy / last.seconds);

  const deepinfer::model::CacheLayout layout = model.cache_layout(EngineOptions{}.block_tokens);
  std::vector<double> paged;
  std::vector<double> held;
  for (const MemorySample& sample : last.memory)
    if (sample.running >= top / 2) {
      paged.push_back(sample.paged_bytes_per_token);
      held.push_back(sample.held_bytes_per_token);
    }
  std::printf("\n== Cache bytes per token (benchmark model, B = %lld) ==\n", static_cast<long long>(layout.block_tokens));
  std::printf("theory: cache_layout bytes_per_token %.1f B; block_bytes / B %.1f B (block %lld B); fixed state %lld B/sequence\n",
              layout.bytes_per_token, static_cast<double>(layout.block_bytes) / static_cast<double>(layout.block_tokens),
              static_cast<long long>(layout.block_bytes), static_cast<long long>(layout.sequence_state_bytes()));
  if (paged.empty()) {
    std::printf("measured: no stats sample with %d+ running sequences\n", top / 2);
  } else {
    std::printf("measured at concurrency %d (%zu samples with >= %d running; median): block tables %.1f B/token (%.2fx theory); "
                "with fixed-state blocks %.1f B/token\n",
                top, paged.size(), top / 2, median(paged), median(paged) / layout.bytes_per_token, median(held));
  }
}

// ---------------------------------------------------------------------------------------------
// Multi-turn replay

std::size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

void replay(const Model& model, const Options& options) {
  const int64_t block = EngineOptions{}.block_tokens;
  std::printf("\n== Multi-turn replay: %d conversations x %d turns, shared system prompt %lld, user %lld, reply %lld ==\n",
              options.conversations, options.turns, static_cast<long long>(options.system_tokens),
              static_cast<long long>(options.user_tokens), static_cast<long long>(options.reply_tokens));
  Engine engine(model, EngineOptions{});
  std::mt19937_64 system_rng(42);
  const std::vector<int32_t> system = random_tokens(system_rng, options.system_tokens, model.vocab_size());
  std::mutex mutex;
  // Every prompt sent and every prompt + reply finished, with how many of its leading tokens had
  // their state computed: all of a prompt; all but the last token of prompt + reply (a sampled
  // token is never fed back once the request ends).
  std::vector<std::pair<std::vector<int32_t>, int64_t>> seen;
  struct Turn {
    int64_t prompt = 0;
    int64_t reusable = 0;        // longest prefix shared with anything sent or generated before
    int64_t reusable_blocks = 0;  // of it, whole blocks of computed state short of the prompt's last token
    int64_t cached = 0;          // served from the prefix cache (StreamEvent::cached_tokens)
  };
  std::vector<std::vector<Turn>> turns(static_cast<std::size_t>(options.conversations));
  std::vector<std::thread> threads;
  const Clock::time_point start = Clock::now();
  for (int c = 0; c < options.conversations; ++c)
    threads.emplace_back([&, c] {
      std::mt19937_64 rng(1000 + static_cast<uint64_t>(c));
      std::vector<int32_t> conversation = system;
      for (int t = 0; t < options.turns; ++t) {
        const std::vector<int32_t> user = random_tokens(rng, options.user_tokens, model.vocab_size());
        conversation.insert(conversation.end(), user.begin(), user.end());
        Turn turn;
        turn.prompt = static_cast<int64_t>(conversation.size());
        {
          std::lock_guard lock(mutex);
          for (const auto& [earlier, computed] : seen) {
            const auto shared = static_cast<int64_t>(common_prefix(conversation, earlier));
            turn.reusable = std::max(turn.reusable, shared);
            turn.reusable_blocks =
                std::max(turn.reusable_blocks, std::min({shared, computed, turn.prompt - 1}) / block * block);
          }
          seen.emplace_back(conversation, turn.prompt);
        }
        const auto stream = engine.submit(greedy_request(conversation, options.reply_tokens));
        std::vector<int32_t> reply;
        while (true) {
          const auto event = stream->next();
          for (const auto& token : event->tokens) reply.push_back(token.token);
          turn.cached = event->cached_tokens;
          if (event->finish) break;
        }
        if (static_cast<int64_t>(reply.size()) != options.reply_tokens) deepinfer::fail("replay: short reply");
        conversation.insert(conversation.end(), reply.begin(), reply.end());
        {
          std::lock_guard lock(mutex);
          seen.emplace_back(conversation, static_cast<int64_t>(conversation.size()) - 1);
        }
        turns[static_cast<std::size_t>(c)].push_back(turn);
      }
    });
  for (std::thread& thread : threads) thread.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  engine.drain();
  const EngineStats stats = engine.stats();

  std::printf("%5s %12s %12s %18s %12s %10s %12s\n", "turn", "prompt tok", "reusable", "reusable (blocks)", "hit tok",
              "hit rate", "hit/reuse blk");
  Turn total;
  for (int t = 0; t < options.turns; ++t) {
    Turn sum;
    for (const auto& conversation : turns) {
      sum.prompt += conversation[static_cast<std::size_t>(t)].prompt;
      sum.reusable += conversation[static_cast<std::size_t>(t)].reusable;
      sum.reusable_blocks += conversation[static_cast<std::size_t>(t)].reusable_blocks;
      sum.cached += conversation[static_cast<std::size_t>(t)].cached;
    }
    std::printf("%5d %12lld %12lld %18lld %12lld %9.1f%% %11.1f%%\n", t + 1, static_cast<long long>(sum.prompt),
                static_cast<long long>(sum.reusable), static_cast<long long>(sum.reusable_blocks),
                static_cast<long long>(sum.cached), 100.0 * static_cast<double>(sum.cached) / static_cast<double>(sum.prompt),
                sum.reusable_blocks ? 100.0 * static_cast<double>(sum.cached) / static_cast<double>(sum.reusable_blocks) : 0.0);
    total.prompt += sum.prompt;
    total.reusable += sum.reusable;
    total.reusable_blocks += sum.reusable_blocks;
    total.cached += sum.cached;
  }
  std::printf("%5s %12lld %12lld %18lld %12lld %9.1f%% %11.1f%%\n", "all", static_cast<long long>(total.prompt),
              static_cast<long long>(total.reusable), static_cast<long long>(total.reusable_blocks),
              static_cast<long long>(total.cached), 100.0 * static_cast<double>(total.cached) / static_cast<double>(total.prompt),
              100.0 * static_cast<double>(total.cached) / static_cast<double>(total.reusable_blocks));
  std::printf("engine counters: prefix queried %lld, hit %lld (hit rate %.1f%%); reusable share of prompt tokens %.1f%% "
              "(%.1f%% in whole blocks); preemptions %lld; %.1f s\n",
              static_cast<long long>(stats.prefix_queried_tokens), static_cast<long long>(stats.prefix_hit_tokens),
              100.0 * static_cast<double>(stats.prefix_hit_tokens) / static_cast<double>(stats.prefix_queried_tokens),
              100.0 * static_cast<double>(total.reusable) / static_cast<double>(total.prompt),
              100.0 * static_cast<double>(total.reusable_blocks) / static_cast<double>(total.prompt),
              static_cast<long long>(stats.preemptions), seconds);
}

// ---------------------------------------------------------------------------------------------
// Released models' cache figures

void released_layouts() {
  std::printf("\n== Theoretical cache bytes of the released configs (cache_layout) ==\n");
  std::printf("%-12s %4s %16s %14s %16s %18s\n", "config", "B", "bytes/token", "block bytes", "fixed state/seq",
              "snapshot at bound.");
  for (const auto& [name, file] : {std::pair{"V4-Flash", "v4_flash.json"}, std::pair{"V4.1-Flash", "v41_flash.json"}})
    for (int64_t block : {int64_t{64}, int64_t{128}}) {
      const auto layout = deepinfer::model::cache_layout(
          deepinfer::load_model_config(std::string(DEEPINFER_TEST_DATA_DIR) + "/configs/" + file), block);
      std::printf("%-12s %4lld %16.1f %14lld %16lld %18lld\n", name, static_cast<long long>(block), layout.bytes_per_token,
                  static_cast<long long>(layout.block_bytes), static_cast<long long>(layout.sequence_state_bytes()),
                  static_cast<long long>(layout.snapshot_bytes()));
    }
}

// ---------------------------------------------------------------------------------------------
// Linear kernel per token

void linear_per_token() {
  struct Shape {
    const char* what;
    int64_t rows;
    int64_t cols;
  };
  // The benchmark model's largest products (BF16): per layer and token 5 expert FFNs (4 routed + 1
  // shared) of w1, w3 [256, 512] and w2 [512, 256], attention q [1024, 256]; the LM head once.
  const Shape shapes[] = {{"expert w1/w3", 256, 512}, {"expert w2", 512, 256}, {"attn wq_b", 1024, 256},
                          {"lm head", 4096, 512}};
  std::printf("\n== kernels::linear, BF16, default pool: microseconds per token ==\n");
  std::printf("%-14s %12s %10s %10s %10s %12s\n", "weight", "rows x cols", "1 tok", "8 tok", "32 tok", "1 / 32");
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (const Shape& shape : shapes) {
    std::vector<uint16_t> weights(static_cast<std::size_t>(shape.rows * shape.cols));
    for (uint16_t& w : weights) {
      const float v = uniform(rng) * 0.05f;
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      w = static_cast<uint16_t>(bits >> 16);
    }
    const deepinfer::kernels::WeightMatrix matrix{deepinfer::kernels::WeightEncoding::BF16, shape.rows, shape.cols,
                                                  weights.data()};
    double per_token[3];
    const int64_t token_counts[3] = {1, 8, 32};
    for (int k = 0; k < 3; ++k) {
      const int64_t tokens = token_counts[k];
      std::vector<float> x(static_cast<std::size_t>(tokens * shape.cols));
      for (float& v : x) v = uniform(rng);
      std::vector<float> y(static_cast<std::size_t>(tokens * shape.rows));
      std::vector<double> samples;
      for (int rep = 0; rep < 5; ++rep) {
        int64_t calls = 0;
        const Clock::time_point start = Clock::now();
        double elapsed = 0;
        do {
          deepinfer::kernels::linear(x.data(), tokens, matrix, y.data());
          ++calls;
          elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        } while (elapsed < 0.05);
        samples.push_back(1e6 * elapsed / static_cast<double>(calls * tokens));
      }
      per_token[k] = median(samples);
    }
    std::printf("%-14s %5lld x %-5lld %10.2f %10.2f %10.2f %11.1fx\n", shape.what, static_cast<long long>(shape.rows),
                static_cast<long long>(shape.cols), per_token[0], per_token[1], per_token[2], per_token[0] / per_token[2]);
  }
}

// ---------------------------------------------------------------------------------------------
// The model alone: one forward_batch decode step of `batch` sequences, no engine

void model_decode_scaling(const Model& model, const Options& options) {
  std::printf("\n== Model::forward_batch decode, no engine: %lld-token contexts, one new token per sequence ==\n",
              static_cast<long long>(options.prompt));
  std::printf("%6s %12s %14s %10s\n", "batch", "ms/step", "ms/token", "vs 1");
  std::mt19937_64 rng(11);
  double base = 0;
  for (int batch : options.concurrency) {
    std::vector<deepinfer::model::SequenceState> sequences;
    for (int i = 0; i < batch; ++i) {
      sequences.push_back(model.new_sequence());
      const std::vector<int32_t> prompt = random_tokens(rng, options.prompt, model.vocab_size());
      model.forward(sequences.back(), prompt, {}, deepinfer::model::LogitRows::None);
    }
    std::vector<std::vector<float>> logits(static_cast<std::size_t>(batch),
                                           std::vector<float>(static_cast<std::size_t>(model.vocab_size())));
    std::vector<std::vector<int32_t>> next(static_cast<std::size_t>(batch));
    std::vector<double> per_step;
    const int steps = batch >= 32 ? 4 : 16;
    for (int step = 0; step < steps; ++step) {
      std::vector<deepinfer::model::BatchItem> items;
      for (int i = 0; i < batch; ++i) {
        next[static_cast<std::size_t>(i)] = random_tokens(rng, 1, model.vocab_size());
        items.push_back(deepinfer::model::BatchItem{.sequence = &sequences[static_cast<std::size_t>(i)],
                                                    .tokens = next[static_cast<std::size_t>(i)],
                                                    .logits = logits[static_cast<std::size_t>(i)],
                                                    .rows = deepinfer::model::LogitRows::Last});
      }
      const Clock::time_point start = Clock::now();
      model.forward_batch(items);
      per_step.push_back(1000 * std::chrono::duration<double>(Clock::now() - start).count());
    }
    const double step_ms = median(per_step);
    if (batch == options.concurrency.front()) base = step_ms / batch;
    std::printf("%6d %12.2f %14.3f %9.2fx\n", batch, step_ms, step_ms / batch, base / (step_ms / batch));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each table row as it is measured, also into a file
  try {
    const Options options = parse(argc, argv);
    deepinfer::test_support::ScratchDir dir;
    deepinfer::test_support::write_v4_benchmark_model(dir.str());
    const Model model = Model::load(dir.str());
    std::printf("engine_bench: V4 benchmark model (hidden 512, 4 layers, ratios 0/4/16/4, 16 experts top-4, vocab 4096, "
                "BF16); %u hardware threads; EngineOptions defaults (max_batch_tokens %lld, block %lld)\n",
                std::thread::hardware_concurrency(), static_cast<long long>(EngineOptions{}.max_batch_tokens),
                static_cast<long long>(EngineOptions{}.block_tokens));
    if (options.linear) {
      linear_per_token();
      model_decode_scaling(model, options);
    }
    throughput(model, options);
    if (options.replay) replay(model, options);
    released_layouts();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "engine_bench: %s\n", error.what());
    return 1;
  }
  return 0;
}

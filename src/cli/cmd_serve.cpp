// `deepinfer serve`: the HTTP server (OpenAI Chat Completions / Completions, Anthropic Messages)
// over one model. SIGTERM or Ctrl-C lets running requests finish (for --shutdown-timeout, then
// cancels them) and exits 0; a second one exits 0 at once.
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include "backend/device.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "cli/serve_data_parallel.h"
#include "core/error.h"
#include "server/data_parallel_front.h"
#include "server/server.h"

namespace deepinfer::cli {
namespace {

constexpr int64_t kCudaMaxBatchTokens = 2048;  // --max-batch-tokens' default on CUDA

constexpr const char* kServeUsage =
    "usage: deepinfer serve [--model DIR] [options]\n"
    "\n"
    "Serves the model over HTTP with DeepSeek's API semantics: POST /v1/chat/completions,\n"
    "/v1/completions, /v1/messages (Anthropic); GET /v1/models, /health, /metrics (Prometheus).\n"
    "SIGTERM / Ctrl-C stops taking requests, lets the running ones finish (for --shutdown-timeout,\n"
    "then cancels them), then exits 0; a second SIGTERM / Ctrl-C exits 0 at once.\n"
    "\n"
    "options:\n"
    "  --model DIR              checkpoint folder (config.json, *.safetensors; default: the embedded\n"
    "                           model, assets/models/deepinfer-mini-v41)\n"
    "  --tokenizer PATH         tokenizer.json (default: DIR/tokenizer.json, else the bundled V4.1 one)\n"
    "  --served-model-name NAME the name clients put in \"model\" (default: the folder's name)\n"
    "  --host H                 address to listen on (default 127.0.0.1)\n"
    "  --port P                 port (default 8000; 0 picks a free one)\n"
    "  --device D               cpu, cuda or cuda:N (default: the first CUDA device when this\n"
    "                           build has the CUDA backend and a GPU answers, else cpu); the\n"
    "                           device line goes to stderr at startup\n"
    "  --enforce-eager          CUDA: launch each kernel of a decode step from the host instead\n"
    "                           of replaying the step's captured CUDA graph (as in vLLM)\n"
    "  --batch-invariant        CUDA: a request's logits have the same bits alone or in any\n"
    "                           batch and chunking (fixed reduction orders; slower at small\n"
    "                           batches)\n"
    "  --data-parallel N        N engine ranks behind this endpoint, each a process with its own\n"
    "                           copy of the model, cache and prefix cache: one per GPU with\n"
    "                           --device cuda (rank i on cuda:i), all on GPU K with --device cuda:K,\n"
    "                           the compute threads split among them on the CPU. A request goes\n"
    "                           to the rank that holds its prompt's prefix while loads are\n"
    "                           balanced, else to the least loaded; a rank that dies is\n"
    "                           restarted (default 1: one engine in this process)\n"
    "  --threads N              compute threads (default: all cores; also DEEPINFER_THREADS)\n"
    "                           (the CPU kernels: the widest the CPU has; DEEPINFER_CPU_ISA=\n"
    "                           portable, avx2 or avx512 picks one)\n"
    "  --http-threads N         threads that parse requests and prepare prompts (default 32;\n"
    "                           connections and streams hold no thread)\n"
    "  --max-connections N      open connections at most; one more gets 503 and is closed at once\n"
    "                           (default: the open-file limit, raised to its hard limit, less 64)\n"
    "  --header-timeout S       seconds a request's head may take from its first byte (and a body\n"
    "                           may stall); then 408 and the connection closes (default 10)\n"
    "  --keep-alive-timeout S   seconds an idle keep-alive connection stays open (default 5)\n"
    "  --shutdown-timeout S     on SIGTERM, seconds running requests may take to finish before\n"
    "                           they are cancelled (default 30)\n"
    "  --max-header-bytes SIZE  a request's head at most (default 64K; 431 beyond)\n"
    "  --max-header-count N     header fields at most (default 128; 431 beyond)\n"
    "  --default-max-tokens N   max_tokens of a request that names none (default: the rest of the\n"
    "                           context)\n"
    "  --cache-memory SIZE      cache memory, bytes or with K/M/G suffix (default 1G)\n"
    "  --max-batch-tokens N     tokens per engine step (default 2048 on CUDA, 512 on the CPU)\n"
    "  --max-running N          sequences per step (default 256)\n"
    "  --max-waiting N          queued requests before 429 (default 4096)\n"
    "  --max-model-len N        prompt + max_tokens limit (default: what the model and cache allow)\n"
    "  --max-body-bytes N       larger request bodies get 413, chunked ones too (default 8 MiB)\n"
    "  --api-key KEY            require \"Authorization: Bearer KEY\" (or x-api-key) on /v1 (also DEEPINFER_API_KEY)\n"
    "  --cors                   answer browsers from any origin (off by default)\n"
    "  --no-prefix-caching      do not reuse cached prompt prefixes\n"
    "  --grammar-compile-timeout MS\n"
    "                           wall-clock bound on compiling one structured-output constraint\n"
    "                           (default 10000; past it the request gets a 400; 0: none)\n"
    "  --grammar-compile-slots N\n"
    "                           constraints compiled at once (default: the hardware threads); one\n"
    "                           waiting for a slot waits within its compile timeout\n"
    "  --grammar-max-memory SIZE\n"
    "                           memory bound on one compiled constraint (grammar, prepared\n"
    "                           tables, each automaton; default 256M; beyond it a 400)\n"
    "  --no-jump-forward        draw every token of a constrained answer, even where the grammar\n"
    "                           forces the next bytes (by default their tokens are appended\n"
    "                           without a draw and computed in the next step, like a prefill)\n"
    "  --disable-overlap-schedule\n"
    "                           issue each step only once the one before it is back on the host\n"
    "                           (by default, on a GPU, a step that continues the computing\n"
    "                           step's sequences is issued while that step computes)\n"
    "  --speculative MODE       off | static | scheduled: speculative decoding with the model's\n"
    "                           DSpark drafter, verifying whole draft blocks (static) or the\n"
    "                           draft tokens the drafter's confidences and the profiled step\n"
    "                           costs favour (scheduled; default when the model has a drafter)\n"
    "  --no-speculation-governor\n"
    "                           scheduled mode drafts at every step (by default it measures, per\n"
    "                           load, whether drafting is faster than not, and drafts only where it is)\n"
    "  --confidence-log FILE    with --speculative static: append each verified draft block's raw\n"
    "                           confidences and kept count to FILE (JSON lines), the data\n"
    "                           `deepinfer calibrate-confidence` fits the drafter's confidence\n"
    "                           temperatures on\n"
    "  --seed N                 requests that give no seed draw from seeds derived from N and\n"
    "                           their order of arrival (default: a fresh seed each); a request's\n"
    "                           own seed replays exactly, with or without --speculative\n"
    "  --max-prompt-logits-memory SIZE\n"
    "                           logits kept per prompt-logprobs chunk (rows x vocab floats;\n"
    "                           default 64M: longer prompts are scored over more steps)\n"
    "\n"
    "exit codes: 0 stopped by a signal, 1 the model could not be loaded or the port bound, 2 bad command line\n";

const std::set<std::string> kServeOptions = {
    "--model", "--tokenizer", "--served-model-name", "--host", "--port", "--threads", "--http-threads",
    "--cache-memory", "--max-batch-tokens", "--max-running", "--max-waiting", "--max-model-len",
    "--max-body-bytes", "--api-key", "--max-prompt-logits-memory", "--device",
    "--grammar-compile-timeout", "--grammar-compile-slots", "--grammar-max-memory", "--max-connections",
    "--header-timeout", "--keep-alive-timeout", "--shutdown-timeout", "--max-header-bytes", "--max-header-count",
    "--default-max-tokens", "--speculative", "--confidence-log", "--seed", "--data-parallel",
    // An engine rank of --data-parallel writes its port to this inherited descriptor once it listens.
    "--ready-fd"};

// Runs `serving` (a Server or a DataParallelFront) until SIGTERM / SIGINT, then drains it; a
// second signal exits at once. `signals` were blocked before any thread was created.
template <typename Serving>
void serve_until_signalled(Serving& serving, const sigset_t& signals, std::chrono::milliseconds shutdown_timeout) {
  std::thread signal_waiter([&serving, signals, shutdown_timeout] {
    int received = 0;
    sigwait(&signals, &received);
    std::fprintf(stderr, "deepinfer serve: %s received, finishing running requests (for up to %.0f s; again to stop at once)\n",
                 received == SIGTERM ? "SIGTERM" : "SIGINT", static_cast<double>(shutdown_timeout.count()) / 1000.0);
    // A second signal ends the process at once, whatever the drain is doing.
    std::thread([signals] {
      int again = 0;
      sigwait(&signals, &again);
      std::fprintf(stderr, "deepinfer serve: second %s, stopping now\n", again == SIGTERM ? "SIGTERM" : "SIGINT");
      std::fflush(stderr);
      std::_Exit(kExitOk);
    }).detach();
    serving.shutdown();
  });
  serving.serve();
  signal_waiter.join();
  std::fprintf(stderr, "deepinfer serve: stopped\n");
}

// The front of --data-parallel: starts the ranks, then serves until a signal.
int run_data_parallel_front(const std::vector<std::string>& argv, const Args& args, server::ServerOptions options,
                            int ranks, const sigset_t& signals) {
  const backend::DeviceSpec spec = cli::device_spec(args);
  int threads = 0;
  if (const char* env = std::getenv("DEEPINFER_THREADS"); env != nullptr) threads = std::atoi(env);
  server::FrontOptions front;
  front.block_tokens = options.engine.block_tokens;
  front.launch.executable = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string placed;
  for (const RankPlacement& placement : place_ranks(ranks, device_option(args), spec, threads)) {
    front.launch.args.push_back(rank_arguments(argv, kServeOptions, placement));
    placed += (placed.empty() ? "" : ", ") + placement.device +
              (placement.device == "cpu" ? " (" + std::to_string(placement.threads) +
                                                   (placement.threads == 1 ? " thread)" : " threads)")
                                             : "");
  }
  // The key reaches the ranks in their environment, not on a command line `ps` shows.
  if (!options.api_key.empty()) front.launch.env.emplace_back("DEEPINFER_API_KEY", options.api_key);
  const std::chrono::milliseconds shutdown_timeout = options.shutdown_timeout;
  front.server = std::move(options);
  std::fprintf(stderr, "deepinfer serve: starting %d engine ranks: %s\n", ranks, placed.c_str());
  server::DataParallelFront serving(std::move(front));
  const int port = serving.bind();
  std::printf("deepinfer serve: listening on http://%s:%d  model \"%s\", data parallel over %d engine ranks (%s)\n",
              args.get("--host").value_or("127.0.0.1").c_str(), port, serving.model_name().c_str(), ranks, placed.c_str());
  std::fflush(stdout);
  serve_until_signalled(serving, signals, shutdown_timeout);
  return kExitOk;
}

// Model::load reports no progress, so on a terminal an elapsed-time line shows it is working.
class LoadingIndicator {
 public:
  explicit LoadingIndicator(std::string what) : active_(isatty(STDERR_FILENO) != 0) {
    if (!active_) return;
    thread_ = std::thread([this, what = std::move(what)] {
      const auto start = std::chrono::steady_clock::now();
      static constexpr char kSpin[] = "|/-\\";
      for (int tick = 0; !stop_; ++tick) {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "\r%c loading %s  %.1f s", kSpin[tick % 4], what.c_str(), seconds);
        std::fflush(stderr);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      std::fputs("\r\033[K", stderr);
    });
  }
  ~LoadingIndicator() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  bool active_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int run_serve(const std::vector<std::string>& argv) {
  try {
    Args args(argv, with_device_flags({"--help", "--cors", "--no-prefix-caching", "--no-jump-forward",
                                                 "--disable-overlap-schedule", "--no-speculation-governor"}),
              kServeOptions);
    if (args.has("--help")) {
      std::fputs(kServeUsage, stdout);
      return kExitOk;
    }
    if (!args.positionals().empty()) throw UsageError{"unexpected argument " + args.positionals().front()};
    server::ServerOptions options;
    options.served_model_name = args.get("--served-model-name").value_or("");
    options.host = args.get("--host").value_or("127.0.0.1");
    options.port = static_cast<int>(args.count("--port", 8000, 0));
    if (options.port > 65535) throw UsageError{"--port must be at most 65535"};
    if (args.get("--threads")) setenv("DEEPINFER_THREADS", std::to_string(args.count("--threads", 1, 1)).c_str(), 1);
    options.http_threads = static_cast<int>(args.count("--http-threads", options.http_threads, 1));
    options.max_connections = args.count("--max-connections", 0, 1);
    auto seconds = [&args](const std::string& option, std::chrono::milliseconds fallback) {
      const double value = args.number(option, static_cast<double>(fallback.count()) / 1000.0);
      if (!(value > 0) || value > 86400.0) throw UsageError{option + " must be a number of seconds in (0, 86400]"};
      return std::chrono::milliseconds(static_cast<int64_t>(value * 1000.0 + 0.5));
    };
    options.header_timeout = seconds("--header-timeout", options.header_timeout);
    options.keep_alive_timeout = seconds("--keep-alive-timeout", options.keep_alive_timeout);
    options.shutdown_timeout = seconds("--shutdown-timeout", options.shutdown_timeout);
    options.max_header_bytes = args.bytes("--max-header-bytes", options.max_header_bytes);
    if (options.max_header_bytes < 256) throw UsageError{"--max-header-bytes must be at least 256"};
    options.max_header_count = args.count("--max-header-count", options.max_header_count, 1);
    if (args.get("--default-max-tokens")) options.default_max_tokens = args.count("--default-max-tokens", 0, 1);
    options.engine.cache_memory_bytes = args.bytes("--cache-memory", options.engine.cache_memory_bytes);
    options.engine.max_batch_tokens = args.count("--max-batch-tokens", options.engine.max_batch_tokens, 1);
    options.engine.max_running = args.count("--max-running", options.engine.max_running, 1);
    options.engine.max_waiting = args.count("--max-waiting", options.engine.max_waiting, 1);
    options.engine.prefix_caching = !args.has("--no-prefix-caching");
    options.engine.jump_forward = !args.has("--no-jump-forward");
    options.engine.overlap_schedule = !args.has("--disable-overlap-schedule");
    options.engine.speculation_governor = !args.has("--no-speculation-governor");
    if (args.get("--seed")) options.engine.seed = static_cast<uint64_t>(args.count("--seed", 0, 0));
    if (auto mode = args.get("--speculative")) {
      options.speculative = engine::parse_speculative_mode(*mode);
      if (!options.speculative) throw UsageError{"--speculative is off, static or scheduled"};
    }
    if (auto log = args.get("--confidence-log")) {
      if (options.speculative != engine::SpeculativeMode::static_blocks)
        throw UsageError{"--confidence-log records whole draft blocks: it needs --speculative static"};
      options.engine.confidence_log = *log;
    }
    options.engine.max_prompt_logits_bytes =
        args.bytes("--max-prompt-logits-memory", options.engine.max_prompt_logits_bytes);
    if (args.get("--max-model-len")) options.max_model_len = args.count("--max-model-len", 0, 2);
    options.max_body_bytes = args.bytes("--max-body-bytes", options.max_body_bytes);
    options.constraints.timeout =
        std::chrono::milliseconds(args.count("--grammar-compile-timeout", options.constraints.timeout.count(), 0));
    options.constraints.max_grammar_bytes = args.bytes("--grammar-max-memory", options.constraints.max_grammar_bytes);
    if (args.get("--grammar-compile-slots")) {
      const int64_t slots = args.count("--grammar-compile-slots", 0, 1);
      if (slots > 4096) throw UsageError{"--grammar-compile-slots: at most 4096"};
      options.constraints.max_concurrent_compiles = static_cast<int>(slots);
    }
    if (auto key = args.get("--api-key")) {
      options.api_key = *key;
    } else if (const char* env = std::getenv("DEEPINFER_API_KEY"); env != nullptr) {
      options.api_key = env;
    }
    options.cors = args.has("--cors");
    const std::string device = device_option(args);
    // After every usage check, so a bad command line exits 2 even when the embedded model is missing.
    auto model_dir = args.get("--model");
    options.model_dir = model_dir ? *model_dir : default_model_dir();
    if (auto tokenizer = args.get("--tokenizer")) {
      options.tokenizer = *tokenizer;
    } else if (!std::filesystem::exists(std::filesystem::path(options.model_dir) / "tokenizer.json")) {
      options.tokenizer = asset_dir() + "/tokenizer/deepseek_v41_tokenizer.json";
    }
    // Signals go to one waiting thread, not to whichever thread runs: block them before any
    // thread (engine, HTTP pool, compute pool) is created so every thread inherits the mask.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

    const auto data_parallel = static_cast<int>(args.count("--data-parallel", 1, 1));
    if (data_parallel > 1024) throw UsageError{"--data-parallel: at most 1024 ranks"};
    std::optional<int> ready_fd;
    if (args.get("--ready-fd")) {
      if (data_parallel > 1) throw UsageError{"--ready-fd is for an engine rank, which has no --data-parallel"};
      ready_fd = static_cast<int>(args.count("--ready-fd", 3, 3));
      // A rank lives no longer than its front, even one killed outright.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (const char* front = std::getenv("DEEPINFER_FRONT_PID"); front != nullptr && std::atoi(front) != ::getppid())
        return kExitFailure;  // the front was already gone
    }
    if (data_parallel > 1) return run_data_parallel_front(argv, args, std::move(options), data_parallel, signals);

    // Resolved before loading, so a device that is not there fails at once; attached by the
    // server's hook between loading the model and starting its engine. After the mask: the CUDA
    // driver starts threads of its own when first asked, and they must not take SIGTERM either.
    const backend::DeviceSpec device_spec = cli::device_spec(args);
    // On the GPU a step of 2048 tokens fills the tensor cores' tiles where 512 leave them a quarter
    // used (measured at concurrency 64 with 1,024-token prompts: +27% output tokens/s, TTFT p50
    // 684 -> 434 ms, TPOT p50 40 -> 33 ms; docs/BENCHMARKS.md); on the CPU a step's time grows with
    // its tokens, and 512 keeps a running decode's stall short.
    if (!args.get("--max-batch-tokens") && device_spec.kind == backend::DeviceSpec::Kind::Cuda)
      options.engine.max_batch_tokens = kCudaMaxBatchTokens;
    std::string device_line;
    // The GPU's activation memory is sized for the engine's largest step.
    const int64_t max_rows = options.engine.max_batch_tokens;
    options.on_model_loaded = [&device_spec, &device_line, max_rows](model::Model& loaded) {
      device_line = backend::attach_device(loaded, device_spec, max_rows);
    };

    std::unique_ptr<server::Server> server;
    {
      LoadingIndicator indicator(options.model_dir);
      server = std::make_unique<server::Server>(options);
    }
    std::fprintf(stderr, "deepinfer serve: %s\n", device_line.c_str());
    const int port = server->bind();
    if (ready_fd) {  // the front waits for this line before it sends the rank anything
      const std::string line = std::to_string(port) + "\n";
      [[maybe_unused]] const ssize_t written = ::write(*ready_fd, line.data(), line.size());
      ::close(*ready_fd);
    }
    server::ServedModel& model = server->model();
    std::printf("deepinfer serve: listening on http://%s:%d  model \"%s\" from %s (%s, vocab %lld, context %lld tokens, "
                "cache %lld blocks of %lld tokens, tokenizer %s, speculative decoding %s)%s\n",
                options.host.c_str(), port, model.name().c_str(), options.model_dir.c_str(),
                model.format() == api::PromptFormat::V41 ? "V4.1" : "V4",
                static_cast<long long>(model.model().vocab_size()), static_cast<long long>(model.context_length()),
                static_cast<long long>(model.total_blocks()), static_cast<long long>(options.engine.block_tokens),
                model.tokenizer_origin().c_str(), engine::speculative_mode_name(model.engine_options().speculative),
                options.api_key.empty() ? "" : ", API key required");
    std::fflush(stdout);

    serve_until_signalled(*server, signals, server->options().shutdown_timeout);
    return kExitOk;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepinfer serve: %s\n\n%s", e.message.c_str(), kServeUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer serve: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli

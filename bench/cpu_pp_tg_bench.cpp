// Prefill and decode throughput of Model::forward on the CPU with llama.cpp's llama-bench semantics,
// so the two engines can be measured side by side on one checkpoint (docs/BENCHMARKS.md, "CPU:
// deepinfer vs llama.cpp"). A plain main(), not Google Benchmark: it takes a model folder.
//
//   cpu_pp_tg_bench --model DIR [--pp 512] [--tg 128] [--threads 1,2] [--reps 5] [--seed 1]
//                   [--spin N] [--no-warmup]
//
// What llama-bench (tools/llama-bench/llama-bench.cpp: test_prompt, test_gen and the loop that
// calls them) does for `-p N -n M -t T -r R`, and what this does in its place:
// - pp N: one forward of N tokens into an empty sequence, logits of the last row only (llama-bench:
//   one llama_decode of a batch of N, n_batch 2048 >= N; llama_batch_get_one asks for the last
//   row's logits). Token 0 is BOS (DeepSeek's tokenizer adds one), the rest uniform random ids.
// - tg M: M single-token forwards starting from an empty sequence, each with its logits (llama-
//   bench: the first token is BOS, then a random id each step; no prompt before them).
// - before the timed runs of a test, one untimed warm-up (pp: a whole pp N; tg: one token), as
//   llama-bench does unless --no-warmup; each timed run then starts from a new, empty sequence
//   (llama-bench clears its KV cache), made outside the timed region.
// - a run's figure is tokens / wall seconds of that run; the table gives the mean ± sample
//   standard deviation over the R runs (llama-bench's "t/s" column) and their median.
// - threads: a ThreadPool of T threads (the caller counts as one) made the default pool
//   (ScopedDefaultThreadPool) for the test; tests run in llama-bench's order (per thread count:
//   pp, then tg). --spin N: the pool's idle workers poll N times before sleeping (default: the
//   pool's default); llama-bench's threads poll too (--poll 50 by default).
// Beside llama-bench: the weight bytes one decode token reads (weight_bytes_per_token) and, per
// thread count, a streaming read of --read-mib MiB on the same pool, so each tg row also gives its
// weight bytes per second and their share of that read bandwidth (issue 18's "batch-1 decode at
// 60% of the read bandwidth"); --read-mib 0 skips it.
// Not mirrored: llama-bench's model is a GGUF with its own KV cache (F16 by default) and graph;
// this runs deepinfer's checkpoint as it is stored (FP8 / FP4 / BF16), with deepinfer's cache.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "host_read_bandwidth.h"
#include "integer_options.h"
#include "io/checkpoint.h"
#include "model/model.h"

namespace {

namespace fs = std::filesystem;
using deepinfer::model::LogitRows;
using deepinfer::model::Model;
using deepinfer::model::SequenceState;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  std::vector<int64_t> pp = {512};
  std::vector<int64_t> tg = {128};
  std::vector<int64_t> threads = {1, 2};
  int64_t reps = 5;
  uint64_t seed = 1;
  bool warmup = true;
  int spin = -1;  // -1: ThreadPool's default
  int64_t read_mib = 1024;
};

[[noreturn]] void usage(const std::string& message) {
  std::fprintf(stderr,
               "cpu_pp_tg_bench: %s\n"
               "usage: cpu_pp_tg_bench --model DIR [--pp 512] [--tg 128] [--threads 1,2] [--reps 5] [--seed 1]\n"
               "       [--spin N] [--no-warmup] [--read-mib 1024]\n"
               "  --pp / --tg / --threads take comma-separated lists; --pp 0 or --tg 0 skips that test\n",
               message.c_str());
  std::exit(2);
}

int64_t parse_integer(const std::string& flag, const std::string& text, int64_t minimum) {
  return deepinfer::bench::parse_integer(flag, text, minimum, usage);
}

std::vector<int64_t> parse_list(const std::string& flag, const std::string& list, int64_t minimum) {
  return deepinfer::bench::parse_integer_list(flag, list, minimum, usage);
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--model") o.model = value();
    else if (flag == "--pp") o.pp = parse_list(flag, value(), 0);
    else if (flag == "--tg") o.tg = parse_list(flag, value(), 0);
    else if (flag == "--threads") o.threads = parse_list(flag, value(), 1);
    else if (flag == "--reps") o.reps = parse_integer(flag, value(), 1);
    else if (flag == "--seed") o.seed = static_cast<uint64_t>(parse_integer(flag, value(), 0));
    else if (flag == "--spin") o.spin = static_cast<int>(parse_integer(flag, value(), 0));
    else if (flag == "--no-warmup") o.warmup = false;
    else if (flag == "--read-mib") o.read_mib = parse_integer(flag, value(), 0);
    else if (flag == "--help" || flag == "-h") usage("prefill (pp) and decode (tg) tokens/s, as llama-bench measures them");
    else usage("unknown option " + flag);
  }
  if (o.model.empty()) usage("--model is required");
  if (o.threads.empty()) usage("--threads needs at least one thread count");
  return o;
}

struct Stats {
  double mean = 0;
  double stddev = 0;
  double median = 0;
};

Stats stats_of(std::vector<double> samples) {
  Stats s;
  const double n = static_cast<double>(samples.size());
  for (double v : samples) s.mean += v / n;
  if (samples.size() > 1) {
    double squares = 0;
    for (double v : samples) squares += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(squares / (n - 1));  // llama-bench's stdev(): the sample standard deviation
  }
  std::sort(samples.begin(), samples.end());
  const std::size_t mid = samples.size() / 2;
  s.median = samples.size() % 2 ? samples[mid] : (samples[mid - 1] + samples[mid]) / 2;
  return s;
}

class Runner {
 public:
  Runner(const Model& model, uint64_t seed)
      : model_(model), random_(seed), logits_(static_cast<std::size_t>(model.vocab_size())) {
    const auto& bos = model.config().bos_token_id;
    bos_ = bos ? static_cast<int32_t>(*bos) : -1;
  }

  // Seconds for one pp run of `tokens` tokens into a new sequence.
  double prompt(int64_t tokens) {
    std::vector<int32_t> ids(static_cast<std::size_t>(tokens));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = i == 0 && bos_ >= 0 ? bos_ : random_id();
    SequenceState sequence = model_.new_sequence();
    const auto start = Clock::now();
    model_.forward(sequence, ids, logits_, LogitRows::Last);
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  // Seconds for `steps` single-token forwards from a new sequence.
  double generate(int64_t steps) {
    SequenceState sequence = model_.new_sequence();
    int32_t token = bos_ >= 0 ? bos_ : random_id();
    const auto start = Clock::now();
    for (int64_t step = 0; step < steps; ++step) {
      model_.forward(sequence, std::span<const int32_t>(&token, 1), logits_, LogitRows::Last);
      token = random_id();
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

 private:
  int32_t random_id() {
    return static_cast<int32_t>(std::uniform_int_distribution<int64_t>(0, model_.vocab_size() - 1)(random_));
  }

  const Model& model_;
  std::mt19937_64 random_;
  std::vector<float> logits_;
  int32_t bos_ = -1;
};

std::string size_of_checkpoint(const std::string& dir) {
  uintmax_t bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors") bytes += entry.file_size();
  char text[64];
  if (bytes >= (uintmax_t{1} << 30)) std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  else std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// Weight bytes a decode token reads: every tensor once, except the routed experts (top-k of a
// layer's E experts: k / E of their bytes, experts being of one size), the embedding and
// tid2eid tables (one row each) and the MTP / DSpark layers (unused by a plain forward).
double weight_bytes_per_token(const std::string& dir, const deepinfer::ModelConfig& config) {
  const deepinfer::Checkpoint checkpoint = deepinfer::Checkpoint::open(dir);
  double bytes = 0;
  for (const auto& tensor : checkpoint.tensors()) {
    const std::string& name = tensor.info->name;
    const auto size = static_cast<double>(tensor.info->byte_size());
    if (name.rfind("mtp.", 0) == 0) continue;
    if (name == "embed.weight" || name.find("tid2eid") != std::string::npos) {
      bytes += size / static_cast<double>(config.vocab_size);
      continue;
    }
    const std::size_t experts_at = name.find(".ffn.experts.");
    if (name.rfind("layers.", 0) == 0 && experts_at != std::string::npos) {
      const int64_t layer = std::stoll(name.substr(7, name.find('.', 7) - 7));
      bytes += size * static_cast<double>(config.num_experts_per_tok) / static_cast<double>(config.routed_experts_of(layer));
      continue;
    }
    bytes += size;
  }
  return bytes;
}

int run(const Options& o) {
  const auto load_start = Clock::now();
  const Model model = Model::load(o.model);
  std::fprintf(stderr, "cpu_pp_tg_bench: %s loaded in %.1f s\n%s", o.model.c_str(),
               std::chrono::duration<double>(Clock::now() - load_start).count(),
               deepinfer::describe(model.config()).c_str());
  const std::string name = fs::path(o.model).lexically_normal().filename().string().empty()
                               ? fs::path(o.model).lexically_normal().parent_path().filename().string()
                               : fs::path(o.model).lexically_normal().filename().string();
  const std::string size = size_of_checkpoint(o.model);
  const double token_bytes = weight_bytes_per_token(o.model, model.config());
  std::optional<deepinfer::bench::HostReadBuffer> read_buffer;
  if (o.read_mib > 0) read_buffer.emplace(o.read_mib << 20);
  std::vector<std::string> bandwidth_lines;
  std::vector<std::pair<int64_t, double>> decode_rates;  // (tg tokens, weight bytes/s) of one thread count

  std::printf("| model | size | backend | threads | test | t/s | median t/s |\n");
  std::printf("| ----- | ---: | ------- | ------: | ---: | --: | ---------: |\n");
  std::fflush(stdout);
  Runner runner(model, o.seed);
  for (int64_t threads : o.threads) {
    deepinfer::ThreadPool pool = o.spin < 0 ? deepinfer::ThreadPool(static_cast<int>(threads))
                                            : deepinfer::ThreadPool(static_cast<int>(threads), o.spin);
    deepinfer::ScopedDefaultThreadPool use(pool);
    struct Test {
      const char* kind;
      int64_t tokens;
    };
    std::vector<Test> tests;
    for (int64_t n : o.pp) tests.push_back({"pp", n});
    for (int64_t n : o.tg) tests.push_back({"tg", n});
    for (const Test& test : tests) {
      const bool prefill = std::string(test.kind) == "pp";
      if (o.warmup) prefill ? runner.prompt(test.tokens) : runner.generate(1);
      std::vector<double> samples;
      for (int64_t rep = 0; rep < o.reps; ++rep) {
        const double seconds = prefill ? runner.prompt(test.tokens) : runner.generate(test.tokens);
        samples.push_back(static_cast<double>(test.tokens) / seconds);
      }
      const Stats s = stats_of(samples);
      std::printf("| %s | %s | CPU (deepinfer) | %lld | %s%lld | %.2f ± %.2f | %.2f |\n", name.c_str(), size.c_str(),
                  static_cast<long long>(threads), test.kind, static_cast<long long>(test.tokens), s.mean, s.stddev,
                  s.median);
      std::fflush(stdout);
      if (!prefill) decode_rates.push_back({test.tokens, token_bytes * s.median});
    }
    double read_rate = 0;
    if (read_buffer) {
      std::vector<double> rates;
      for (int64_t rep = 0; rep < std::max<int64_t>(o.reps, 3); ++rep) {
        const auto start = Clock::now();
        volatile float sink = read_buffer->read_all(pool);
        (void)sink;
        rates.push_back(static_cast<double>(read_buffer->bytes()) / std::chrono::duration<double>(Clock::now() - start).count());
      }
      read_rate = stats_of(rates).median;
      char line[256];
      std::snprintf(line, sizeof line, "threads %lld: streaming read of %lld MiB: %.2f GB/s (median of %zu)",
                    static_cast<long long>(threads), static_cast<long long>(o.read_mib), read_rate * 1e-9, rates.size());
      bandwidth_lines.push_back(line);
    }
    for (const auto& [tokens, rate] : decode_rates) {
      char line[256];
      std::snprintf(line, sizeof line, "threads %lld: tg%lld reads %.2f GB/s of weights (median)",
                    static_cast<long long>(threads), static_cast<long long>(tokens), rate * 1e-9);
      bandwidth_lines.push_back(line);
      if (read_rate > 0) bandwidth_lines.back() += ", " + std::to_string(static_cast<int>(100.0 * rate / read_rate + 0.5)) + "% of the read";
    }
    decode_rates.clear();
  }
  std::printf("\ndecode reads %.2f MiB of weights per token (every tensor once; routed experts k/E of theirs; one "
              "embedding row)\n",
              token_bytes / (1 << 20));
  for (const std::string& line : bandwidth_lines) std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    return run(options);
  } catch (const deepinfer::Error& e) {
    std::fprintf(stderr, "cpu_pp_tg_bench: %s\n", e.what());
    return 1;
  }
}

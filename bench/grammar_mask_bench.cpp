// The cost of structured output per token, as llguidance's MaskBench measures it: every schema of
// the JSONSchemaBench dev split compiled (time: compile + prepare), then each of its valid
// instances (compact JSON) walked token by token with the DeepSeek tokenizer, timing the mask of
// every step (Matcher::fill_mask over the 129,280-token vocabulary) and the final one that must
// allow EOS. Prints the compile and mask percentiles. A plain main(): it takes data paths.
//
//   grammar_mask_bench [--dev FILE.jsonl.xz] [--tokenizer FILE] [--limit N] [--json] [--verify]
//                      [--warm] [--cpu-time] [--slowest N] [--schema ID]...
//
// --warm walks each schema's valid instances once untimed first, so the timed walk sees the
// masks a schema's earlier requests left in its cache (a schema every request of a client sends).
// --verify also walks the vocabulary at every step and fails on any cached mask that differs
// (slow: every step costs a full walk).
// --cpu-time times compiles and masks by the thread's CPU clock instead of the wall clock: on a
// shared machine the wall clock's tail is mostly other processes' time slices (a 4 ms tick).
// --slowest N prints the N slowest masks after the summary (to stderr), each with its schema
// (split and id), instance, step and the last bytes of the output before it: where the tail is;
// and before them the slowest compiles (N, at most 10).
// --schema ID (repeatable) runs only the schemas with that id (to profile the slowest ones).
//
// Defaults: ../shared/structured/jsonschemabench_dev.jsonl.xz beside the checkout, the bundled
// DeepSeek-V4.1 tokenizer, every schema.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "grammar/tokenizer_vocabulary.h"
#include "io/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;

struct Options {
  std::string dev = std::string(DEEPINFER_ASSET_DIR) + "/../../shared/structured/jsonschemabench_dev.jsonl.xz";
  std::string tokenizer = std::string(DEEPINFER_ASSET_DIR) + "/tokenizer/deepseek_v41_tokenizer.json";
  int64_t limit = 0;  // 0: every schema
  bool json = false;
  bool verify = false;
  bool warm = false;
  bool cpu_time = false;
  int64_t slowest = 0;
  std::vector<std::string> only;  // schema ids; empty: every schema
};

[[noreturn]] void usage(const std::string& message) {
  std::fprintf(stderr, "grammar_mask_bench: %s\nusage: grammar_mask_bench [--dev FILE.jsonl.xz] [--tokenizer FILE] "
                       "[--limit N] [--json] [--verify] [--warm] [--cpu-time] [--slowest N] [--schema ID]...\n", message.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--dev") o.dev = value();
    else if (flag == "--tokenizer") o.tokenizer = value();
    else if (flag == "--limit") o.limit = std::atoll(value().c_str());
    else if (flag == "--json") o.json = true;
    else if (flag == "--verify") o.verify = true;
    else if (flag == "--warm") o.warm = true;
    else if (flag == "--cpu-time") o.cpu_time = true;
    else if (flag == "--slowest") o.slowest = std::atoll(value().c_str());
    else if (flag == "--schema") o.only.push_back(value());
    else usage("unknown option " + flag);
  }
  return o;
}

// Microseconds on the clock the options choose.
double now_us(const Options& o) {
  if (o.cpu_time) {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
  }
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

// A timed mask and where it was taken, for --slowest.
struct SlowMask {
  double us;
  std::string schema;  // split/id
  int64_t instance, step;
  std::string before;  // the output's last bytes before the mask
};

// The output's last `n` bytes, printable: JSON escapes for the rest.
std::string tail_of(const std::string& text, std::size_t n) {
  const std::string tail = text.size() > n ? text.substr(text.size() - n) : text;
  return nlohmann::json(tail).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

double percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto index = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(index, sorted.size() - 1)];
}

int run(const Options& o) {
  const deepinfer::Tokenizer tokenizer = deepinfer::Tokenizer::from_file(o.tokenizer);
  const auto vocabulary = deepinfer::grammar::vocabulary_for(tokenizer);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(("xz -dc '" + o.dev + "'").c_str(), "r"), pclose);
  if (!pipe) deepinfer::fail("cannot run xz on ", o.dev);
  std::vector<double> compile_ms, mask_us;
  std::vector<std::pair<double, std::string>> compile_of;  // ms and schema, for --slowest
  int64_t schemas = 0, compiled = 0, instances = 0, accepted = 0;
  std::vector<uint64_t> mask(static_cast<std::size_t>((vocabulary->size() + 63) / 64)), walked(mask.size());
  int64_t hits = 0, misses = 0;
  std::vector<SlowMask> slowest;  // a heap on us, least first, at most o.slowest
  std::string line;
  char buffer[1 << 16];
  while (o.limit == 0 || schemas < o.limit) {
    line.clear();
    while (fgets(buffer, sizeof buffer, pipe.get())) {
      line += buffer;
      if (line.back() == '\n') break;
    }
    if (line.empty()) break;
    const ojson record = ojson::parse(line);
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), record["id"].get<std::string>()) == o.only.end())
      continue;
    ++schemas;
    const double start = now_us(o);
    std::shared_ptr<const deepinfer::grammar::CompiledGrammar> grammar;
    try {
      grammar = deepinfer::grammar::prepare(deepinfer::grammar::compile_json_schema(record["schema"], {}));
    } catch (const deepinfer::grammar::CompileError&) {
      continue;  // refused: the test suite counts these
    }
    compile_ms.push_back((now_us(o) - start) / 1e3);
    compile_of.emplace_back(compile_ms.back(), record["split"].get<std::string>() + "/" + record["id"].get<std::string>());
    ++compiled;
    // One valid instance token by token; `timed`: its masks count.
    const auto walk = [&](const ojson& instance, int64_t instance_index, bool timed) {
      deepinfer::grammar::Matcher matcher(grammar, vocabulary);
      std::string output;
      int64_t step = 0;
      const auto timed_mask = [&] {
        const double begin = now_us(o);
        matcher.fill_mask(mask);
        const double us = now_us(o) - begin;
        if (timed) mask_us.push_back(us);
        if (timed && o.slowest > 0 &&
            (static_cast<int64_t>(slowest.size()) < o.slowest || us > slowest.front().us)) {
          const auto less = [](const SlowMask& a, const SlowMask& b) { return a.us > b.us; };
          if (static_cast<int64_t>(slowest.size()) == o.slowest) {
            std::pop_heap(slowest.begin(), slowest.end(), less);
            slowest.pop_back();
          }
          slowest.push_back({us, record["split"].get<std::string>() + "/" + record["id"].get<std::string>(),
                             instance_index, step, tail_of(output, 60)});
          std::push_heap(slowest.begin(), slowest.end(), less);
        }
        ++step;
        if (o.verify) {
          matcher.fill_mask(walked, /*cached=*/false);
          if (walked != mask) deepinfer::fail("a cached mask differs from the walk (schema ", schemas, ")");
        }
      };
      for (const int32_t id : tokenizer.encode_plain(instance.dump())) {
        timed_mask();
        if (!((mask[static_cast<std::size_t>(id) / 64] >> (id % 64)) & 1) || !matcher.accept_token(id)) return false;
        output += vocabulary->bytes(id);
      }
      timed_mask();  // the step that must allow EOS
      return true;
    };
    for (int pass = o.warm ? 0 : 1; pass < 2; ++pass)
      for (std::size_t t = 0; t < record["tests"].size(); ++t) {
        const ojson& test = record["tests"][t];
        if (!test["valid"].get<bool>()) continue;
        const bool ok = walk(test["data"], static_cast<int64_t>(t), pass == 1);
        if (pass == 1) {
          ++instances;
          accepted += ok;
        }
      }
    hits += deepinfer::grammar::Matcher(grammar, vocabulary).mask_cache_stats().hits;
    misses += deepinfer::grammar::Matcher(grammar, vocabulary).mask_cache_stats().misses;
  }
  std::sort(compile_ms.begin(), compile_ms.end());
  std::sort(mask_us.begin(), mask_us.end());
  const nlohmann::json out = {
      {"schemas", schemas},
      {"compiled", compiled},
      {"valid_instances", instances},
      {"accepted", accepted},
      {"masks", mask_us.size()},
      {"cache_hits", hits},
      {"cache_misses", misses},
      {"compile_ms", {{"p50", percentile(compile_ms, 0.5)}, {"p99", percentile(compile_ms, 0.99)}}},
      {"mask_us",
       {{"p50", percentile(mask_us, 0.5)},
        {"p99", percentile(mask_us, 0.99)},
        {"p999", percentile(mask_us, 0.999)},
        {"max", mask_us.empty() ? 0.0 : mask_us.back()}}}};
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("schemas %lld (compiled %lld), valid instances %lld (accepted %lld), masks %zu (cache hits %lld, "
                "misses %lld)\n",
                static_cast<long long>(schemas), static_cast<long long>(compiled), static_cast<long long>(instances),
                static_cast<long long>(accepted), mask_us.size(), static_cast<long long>(hits),
                static_cast<long long>(misses));
    std::printf("compile ms: p50 %.3f  p99 %.3f\n", percentile(compile_ms, 0.5), percentile(compile_ms, 0.99));
    std::printf("mask us:    p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n", percentile(mask_us, 0.5),
                percentile(mask_us, 0.99), percentile(mask_us, 0.999), mask_us.empty() ? 0.0 : mask_us.back());
  }
  std::sort(compile_of.begin(), compile_of.end(), std::greater<>());
  for (std::size_t i = 0; i < compile_of.size() && static_cast<int64_t>(i) < std::min<int64_t>(o.slowest, 10); ++i)
    std::fprintf(stderr, "%10.2f ms  compile %s\n", compile_of[i].first, compile_of[i].second.c_str());
  std::sort(slowest.begin(), slowest.end(), [](const SlowMask& a, const SlowMask& b) { return a.us > b.us; });
  for (const SlowMask& m : slowest)
    std::fprintf(stderr, "%10.1f us  %s  test %lld step %lld  after %s\n", m.us, m.schema.c_str(),
                 static_cast<long long>(m.instance), static_cast<long long>(m.step), m.before.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "grammar_mask_bench: %s\n", error.what());
    return 1;
  }
}

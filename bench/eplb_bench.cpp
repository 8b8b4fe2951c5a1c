// EPLB's load balance on a skewed routing trace (issue 16): how unevenly the GPUs of an
// expert-parallel group are loaded with the contiguous placement (expert e on GPU e / (E / G), no
// redundancy) and with DeepSeek's EPLB (parallel/expert_placement.h), as max / mean GPU load.
// Host arithmetic only; no GPU needed.
//
//   eplb_bench [--experts 384] [--top-k 6] [--layers 8] [--tokens 32768] [--skew 0.9] [--seed 1]
//              [--shape SLOTS:GROUPS:NODES:GPUS ...]
//   eplb_bench --model DIR --chats FILE.jsonl [--shape ...]
//
// The trace: in every layer each expert gets a popularity 1 / rank^skew (Zipf; ranks shuffled per
// layer), and each token routes to top-k distinct experts drawn by popularity. Two windows are
// drawn from the same distribution: EPLB places the experts from the first window's counts (the
// "measured" load a server collects), and both placements are scored on the second (the load it
// then serves), so the figure includes what a placement made from past counts loses on new ones.
//
// With --model, the trace is a real router's instead: the model (CPU) runs the messages of each
// JSON line of --chats (their contents joined, tokenized with the model's tokenizer.json) and
// its MoE layers' routing decisions are counted; the first half of the chats is the measured
// window, the second half the served one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "integer_options.h"
#include "io/tokenizer/tokenizer.h"
#include "model/model.h"
#include "parallel/expert_placement.h"

namespace {

using deepinfer::parallel::BalanceShape;

struct Options {
  int64_t experts = 384, top_k = 6, layers = 8, tokens = 32768;
  double skew = 0.9;
  uint64_t seed = 1;
  std::string model, chats;
  std::vector<BalanceShape> shapes;
};

[[noreturn]] void usage(const std::string& message) {
  if (!message.empty()) std::fprintf(stderr, "%s\n", message.c_str());
  std::fprintf(stderr,
               "usage: eplb_bench [--experts 384] [--top-k 6] [--layers 8] [--tokens 32768] [--skew 0.9] [--seed 1]\n"
               "                  [--shape SLOTS:GROUPS:NODES:GPUS ...]\n"
               "       eplb_bench --model DIR --chats FILE.jsonl [--shape ...]\n");
  std::exit(2);
}

int64_t integer(const std::string& flag, const std::string& text, int64_t minimum) {
  return deepinfer::bench::parse_integer(flag, text, minimum, [](const std::string& m) { usage(m); });
}

BalanceShape parse_shape(const std::string& text) {
  std::vector<int64_t> parts;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t colon = std::min(text.find(':', at), text.size());
    parts.push_back(integer("--shape", text.substr(at, colon - at), 1));
    at = colon + 1;
  }
  if (parts.size() != 4) usage("--shape takes SLOTS:GROUPS:NODES:GPUS");
  return BalanceShape{parts[0], parts[1], parts[2], parts[3]};
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--experts") o.experts = integer(flag, value, 1);
    else if (flag == "--top-k") o.top_k = integer(flag, value, 1);
    else if (flag == "--layers") o.layers = integer(flag, value, 1);
    else if (flag == "--tokens") o.tokens = integer(flag, value, 1);
    else if (flag == "--seed") o.seed = static_cast<uint64_t>(integer(flag, value, 0));
    else if (flag == "--skew") o.skew = std::atof(value.c_str());
    else if (flag == "--shape") o.shapes.push_back(parse_shape(value));
    else if (flag == "--model") o.model = value;
    else if (flag == "--chats") o.chats = value;
    else usage("eplb_bench: unknown flag " + flag);
  }
  if (o.model.empty() != o.chats.empty()) usage("--model and --chats go together");
  if (o.top_k > o.experts) usage("--top-k is larger than --experts");
  if (!(o.skew >= 0)) usage("--skew must be >= 0");
  return o;
}

// One node of 8 GPUs without and with redundancy, then 2 and 4 nodes (hierarchical: 8 groups);
// for fewer than 64 experts, 4 GPUs with 0, 1 and 2 redundant experts a GPU.
std::vector<BalanceShape> default_shapes(int64_t e) {
  if (e < 64 || e % 32 != 0) return {{e, 1, 1, 4}, {e + 4, 1, 1, 4}, {e + 8, 1, 1, 4}};
  return {{e, 1, 1, 8}, {e + 32, 1, 1, 8}, {e + 64, 1, 1, 8}, {e + 32, 8, 2, 16}, {e + 64, 8, 4, 32}};
}

// The model's routing on the chats' text: [window][layer][expert] counts, over its MoE layers.
std::vector<std::vector<std::vector<double>>> routed_counts(const Options& o, int64_t& experts, int64_t& tokens) {
  const deepinfer::model::Model model = deepinfer::model::Model::load(o.model);
  const deepinfer::Tokenizer tokenizer = deepinfer::Tokenizer::from_file(o.model);
  std::ifstream in(o.chats);
  if (!in) deepinfer::fail("cannot read ", o.chats);
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json chat = nlohmann::json::parse(line);
    std::string text;
    for (const auto& m : chat.at("messages"))
      if (m.contains("content") && m["content"].is_string()) text += m["content"].get<std::string>() + "\n";
    texts.push_back(text);
  }
  if (texts.size() < 2) deepinfer::fail(o.chats, ": fewer than two chats");
  std::vector<std::vector<std::vector<double>>> counts(2);
  experts = 0;
  tokens = 0;
  for (std::size_t c = 0; c < texts.size(); ++c) {
    const std::vector<int32_t> ids = tokenizer.encode(texts[c]);
    if (ids.empty()) continue;
    deepinfer::model::SequenceState sequence = model.new_sequence();
    deepinfer::model::ForwardTrace trace;
    model.forward(sequence, ids, {}, deepinfer::model::LogitRows::None, &trace);
    auto& window = counts[c < texts.size() / 2 ? 0 : 1];
    for (std::size_t layer = 0; layer < trace.routing.size(); ++layer) {
      if (window.size() <= layer) window.resize(layer + 1);
      for (const auto& decision : trace.routing[layer])
        for (const int32_t e : decision.experts) {
          if (e < 0) continue;
          if (window[layer].size() <= static_cast<std::size_t>(e)) window[layer].resize(static_cast<std::size_t>(e) + 1);
          window[layer][static_cast<std::size_t>(e)] += 1;
          experts = std::max<int64_t>(experts, e + 1);
        }
    }
    tokens += static_cast<int64_t>(ids.size());
  }
  for (auto& window : counts) {
    window.resize(std::max(counts[0].size(), counts[1].size()));
    for (auto& layer : window) layer.resize(static_cast<std::size_t>(experts));
  }
  return counts;
}

// Per-expert token counts of one window: `tokens` tokens, each to top_k distinct experts drawn by
// popularity (draws repeated until distinct).
std::vector<double> window_counts(const std::vector<double>& popularity, int64_t tokens, int64_t top_k,
                                  std::mt19937_64& rng) {
  std::discrete_distribution<int64_t> pick(popularity.begin(), popularity.end());
  std::vector<double> counts(popularity.size(), 0.0);
  std::vector<int64_t> chosen;
  for (int64_t t = 0; t < tokens; ++t) {
    chosen.clear();
    while (static_cast<int64_t>(chosen.size()) < top_k) {
      const int64_t e = pick(rng);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (const int64_t e : chosen) counts[static_cast<std::size_t>(e)] += 1;
  }
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o = parse(argc, argv);
    std::mt19937_64 rng(o.seed);
    std::vector<std::vector<double>> measured, served;
    if (!o.model.empty()) {
      int64_t tokens = 0;
      auto counts = routed_counts(o, o.experts, tokens);
      measured = std::move(counts[0]);
      served = std::move(counts[1]);
      o.layers = static_cast<int64_t>(measured.size());
      if (o.shapes.empty()) o.shapes = default_shapes(o.experts);
      std::printf("trace: %s routing %lld tokens of %s, %lld MoE layers of %lld experts; the first half of the chats "
                  "measured, the second served\n",
                  o.model.c_str(), static_cast<long long>(tokens), o.chats.c_str(), static_cast<long long>(o.layers),
                  static_cast<long long>(o.experts));
    }
    if (o.shapes.empty()) o.shapes = default_shapes(o.experts);
    for (int64_t layer = 0; o.model.empty() && layer < o.layers; ++layer) {
      std::vector<double> popularity(static_cast<std::size_t>(o.experts));
      for (int64_t r = 0; r < o.experts; ++r)
        popularity[static_cast<std::size_t>(r)] = 1.0 / std::pow(static_cast<double>(r + 1), o.skew);
      std::shuffle(popularity.begin(), popularity.end(), rng);
      measured.push_back(window_counts(popularity, o.tokens, o.top_k, rng));
      served.push_back(window_counts(popularity, o.tokens, o.top_k, rng));
    }
    const auto& hottest = *std::max_element(served[0].begin(), served[0].end());
    const double served_total = std::accumulate(served[0].begin(), served[0].end(), 0.0);
    if (o.model.empty())
      std::printf("trace: %lld layers, %lld experts top-%lld, Zipf skew %.2f, %lld tokens a window; layer 0's hottest "
                "expert takes %.1fx the mean\n",
                static_cast<long long>(o.layers), static_cast<long long>(o.experts), static_cast<long long>(o.top_k),
                o.skew, static_cast<long long>(o.tokens),
                hottest / (static_cast<double>(o.tokens * o.top_k) / static_cast<double>(o.experts)));
    else
      std::printf("layer 0's hottest expert takes %.1fx the mean of the served window\n",
                  hottest / (served_total / static_cast<double>(o.experts)));
    std::printf("max / mean GPU load, mean over layers (worst layer):\n");
    std::printf("%-24s %-18s %-18s %-18s\n", "slots:groups:nodes:gpus", "contiguous", "EPLB, same window",
                "EPLB, next window");
    for (const BalanceShape& shape : o.shapes) {
      double before = 0, before_worst = 0, same = 0, same_worst = 0, next = 0, next_worst = 0;
      for (int64_t layer = 0; layer < o.layers; ++layer) {
        const auto l = static_cast<std::size_t>(layer);
        const auto placement = deepinfer::parallel::balance_experts(measured[l], shape);
        const double b = deepinfer::parallel::load_imbalance(
            deepinfer::parallel::contiguous_placement(o.experts, shape.gpus), served[l]);
        const double s = deepinfer::parallel::load_imbalance(placement, measured[l]);
        const double n = deepinfer::parallel::load_imbalance(placement, served[l]);
        before += b, same += s, next += n;
        before_worst = std::max(before_worst, b), same_worst = std::max(same_worst, s), next_worst = std::max(next_worst, n);
      }
      const double layers = static_cast<double>(o.layers);
      char label[64];
      std::snprintf(label, sizeof label, "%lld:%lld:%lld:%lld", static_cast<long long>(shape.physical_experts),
                    static_cast<long long>(shape.groups), static_cast<long long>(shape.nodes),
                    static_cast<long long>(shape.gpus));
      std::printf("%-24s %6.3f (%6.3f)    %6.3f (%6.3f)    %6.3f (%6.3f)\n", label, before / layers, before_worst,
                  same / layers, same_worst, next / layers, next_worst);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "eplb_bench: %s\n", e.what());
    return 1;
  }
}

// `deepinfer perplexity`: the mean next-token NLL (and its exp) of a model over a JSONL file of
// examples, with the definition of tools/train/train.py's `evaluate`, so the engine's figure and
// the training script's can be compared directly: per example, from position 0, the NLL of each
// target token given everything before it; summed over every target token of the file and divided
// by their count. `--ids-file` scores one sequence of token ids instead and can list each
// token's NLL.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/prompt_tokens.h"
#include "api/training_render.h"
#include "backend/device.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/tokenizer/tokenizer.h"
#include "model/model.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kPerplexityUsage =
    "usage: deepinfer perplexity (--file FILE | --ids-file IDS.json) [--model DIR] [options]\n"
    "\n"
    "Scores a JSONL file of examples with the model and prints the mean negative log-likelihood\n"
    "of their target tokens and the perplexity exp(mean NLL), as tools/train/train.py evaluates:\n"
    "each example is run from position 0 (truncated to --ctx tokens), and every target token's\n"
    "NLL given all the tokens before it is summed over the file and divided by the target count.\n"
    "\n"
    "Each line is one example, by its JSON type:\n"
    "  a string   raw text: ids = BOS + its tokens (as `deepinfer tokenize --add-bos`);\n"
    "             every token after BOS is a target\n"
    "  an object  a Chat Completions request body whose LAST message is the assistant answer, as\n"
    "             `deepinfer render --train` takes it: the targets are the answer's ids\n"
    "             (reasoning, answer or tool calls, end-of-sentence) after the served prompt\n"
    "\n"
    "--ids-file scores one sequence given as token ids instead: a JSON array [id, ...]; every id\n"
    "after the first is a target, and each target's NLL is printed (one line per target:\n"
    "position, id, NLL; with --json the array \"nll\").\n"
    "\n"
    "options:\n"
    "  --file FILE       the examples (- = stdin)\n"
    "  --ids-file FILE   one sequence of token ids, a JSON array (- = stdin); no tokenizer needed\n"
    "  --model DIR       checkpoint folder (default: the embedded deepinfer-mini-v41)\n"
    "  --tokenizer PATH  tokenizer.json (default: DIR/tokenizer.json)\n"
    "  --ctx N           tokens of each example scored, from its start (default 1024)\n"
    "  --batch N         examples run together in one batched forward pass (default 8); the\n"
    "                    figures do not depend on it\n"
    "  --threads N       compute threads (default: all cores; also DEEPINFER_THREADS)\n"
    "  --device D        cpu, cuda or cuda:N (default: the first CUDA device when this build has\n"
    "                    the CUDA backend and a GPU answers, else cpu)\n"
    "  --enforce-eager   CUDA: no CUDA graphs for decode steps\n"
    "  --batch-invariant CUDA: logits with the same bits in any batch and chunking (fixed\n"
    "                    reduction orders; slower at small batches)\n"
    "  --json            print one JSON object: file, examples, tokens (targets scored),\n"
    "                    mean_nll, perplexity (also as ppl), seconds; with --ids-file also nll (each\n"
    "                    target's NLL in order) before mean_nll\n"
    "\n"
    "exit codes: 0 done, 1 bad model, tokenizer or example (the line is named), 2 bad command line\n";

// Tokens each sequence advances per batched forward call once its targets begin: bounds the
// logits buffer to batch * kChunkTokens rows of the vocabulary.
constexpr int64_t kChunkTokens = 32;

struct Example {
  std::vector<int32_t> ids;     // truncated to --ctx
  std::size_t first_target = 1; // ids[first_target:] are scored; >= 1 (position 0 has no context)
};

Example parse_example(const std::string& line, const std::string& where, const api::PromptEncoder& encoder,
                      api::PromptFormat format, int64_t ctx, int64_t vocab) {
  const nlohmann::ordered_json value = nlohmann::ordered_json::parse(line, nullptr, /*allow_exceptions=*/false);
  Example example;
  if (value.is_string()) {
    const auto bos = encoder.tokenizer().bos_id();
    if (!bos) fail(where, ": a text example needs a tokenizer with a BOS token");
    example.ids.push_back(*bos);
    const auto encoded = encoder.tokenizer().encode(value.get<std::string>());
    example.ids.insert(example.ids.end(), encoded.begin(), encoded.end());
  } else if (value.is_object()) {
    api::TrainingRender rendered = api::render_training(encoder, format, value, where);
    example.ids = std::move(rendered.ids);
    example.first_target = rendered.answer_start;
  } else {
    fail(where, value.is_discarded() ? ": not valid JSON" : ": expected a JSON string (text) or object",
         " (a string of text, or a Chat Completions body whose last message is the assistant answer)");
  }
  if (static_cast<int64_t>(example.ids.size()) > ctx) example.ids.resize(static_cast<std::size_t>(ctx));
  if (example.first_target >= example.ids.size())
    fail(where, ": no target token to score", value.is_string() ? " (empty text)" : "",
         static_cast<int64_t>(example.ids.size()) == ctx ? " within the first --ctx tokens" : "");
  for (const int32_t id : example.ids)
    if (id < 0 || id >= vocab) fail(where, ": token id ", id, " is outside the model's vocabulary (", vocab, ")");
  return example;
}

std::vector<Example> read_examples(std::istream& in, const std::string& source, const api::PromptEncoder& encoder,
                                   api::PromptFormat format, int64_t ctx, int64_t vocab) {
  std::vector<Example> examples;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number)
    examples.push_back(parse_example(line, source + " line " + std::to_string(number), encoder, format, ctx, vocab));
  if (in.bad()) fail(source, ": read error");
  if (examples.empty()) fail(source, ": no examples (the file is empty)");
  return examples;
}

// -log softmax(row)[target], the log-sum-exp taken around the row's maximum and summed in double.
double next_token_nll(const float* row, int64_t vocab, int32_t target) {
  const float max = *std::max_element(row, row + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - max);
  return static_cast<double>(max) + std::log(sum) - static_cast<double>(row[target]);
}

// --ids-file: a JSON array of token ids, one example whose targets are every id after the first.
Example read_ids_example(std::istream& in, const std::string& source, int64_t ctx, int64_t vocab) {
  const nlohmann::json value = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (in.bad()) fail(source, ": read error");
  if (!value.is_array()) fail(source, value.is_discarded() ? ": not valid JSON" : ": expected a JSON array of token ids");
  Example example;
  for (const auto& id : value) {
    if (!id.is_number_integer()) fail(source, ": ", id.dump(), " is not a token id");
    const int64_t number = id.get<int64_t>();
    if (number < 0 || number >= vocab)
      fail(source, ": token id ", number, " is outside the model's vocabulary (", vocab, ")");
    example.ids.push_back(static_cast<int32_t>(number));
  }
  if (example.ids.size() < 2) fail(source, ": need at least 2 token ids (the first has no target)");
  if (static_cast<int64_t>(example.ids.size()) > ctx) example.ids.resize(static_cast<std::size_t>(ctx));
  return example;
}

// Runs `group` through the model together and returns each example's NLL summed over its targets;
// `per_token` (optional) gets each example's target NLLs in position order.
// Each sequence first takes its whole untargeted prefix (no logits), then kChunkTokens at a time;
// the last id is never fed (it predicts nothing). forward_batch's logits do not depend on the batch
// or the chunking, and each sum is added in position order, so the sums do not depend on either.
// `logits` is scratch kept across calls: it only grows, so its pages are zeroed once.
std::vector<double> score_group(const model::Model& model, std::span<const Example> group, std::vector<float>& logits,
                                std::vector<std::vector<double>>* per_token = nullptr) {
  const int64_t vocab = model.vocab_size();
  std::vector<model::SequenceState> sequences;
  sequences.reserve(group.size());
  for (std::size_t i = 0; i < group.size(); ++i) sequences.push_back(model.new_sequence());
  std::vector<std::size_t> fed(group.size(), 0);
  std::vector<double> sums(group.size(), 0.0);
  if (per_token) per_token->assign(group.size(), {});
  std::vector<double> row_nll;
  while (true) {
    std::vector<model::BatchItem> items;
    std::vector<std::size_t> item_example;
    int64_t rows = 0;
    for (std::size_t e = 0; e < group.size(); ++e) {
      const std::size_t stop = group[e].ids.size() - 1;
      if (fed[e] >= stop) continue;
      const std::size_t untargeted = group[e].first_target - 1;  // positions whose logits nobody reads
      const bool prefix = fed[e] < untargeted;
      const std::size_t end = prefix ? untargeted : std::min(stop, fed[e] + static_cast<std::size_t>(kChunkTokens));
      model::BatchItem item;
      item.sequence = &sequences[e];
      item.tokens = std::span(group[e].ids).subspan(fed[e], end - fed[e]);
      item.rows = prefix ? model::LogitRows::None : model::LogitRows::All;
      if (!prefix) rows += static_cast<int64_t>(end - fed[e]);
      items.push_back(item);
      item_example.push_back(e);
    }
    if (items.empty()) break;
    if (logits.size() < static_cast<std::size_t>(rows * vocab)) logits.resize(static_cast<std::size_t>(rows * vocab));
    std::vector<int32_t> targets;
    int64_t row = 0;
    for (std::size_t k = 0; k < items.size(); ++k) {
      if (items[k].rows != model::LogitRows::All) continue;
      const int64_t count = static_cast<int64_t>(items[k].tokens.size());
      items[k].logits = std::span(logits).subspan(static_cast<std::size_t>(row * vocab), static_cast<std::size_t>(count * vocab));
      const auto& ids = group[item_example[k]].ids;
      const std::size_t start = fed[item_example[k]];
      targets.insert(targets.end(), ids.begin() + static_cast<std::ptrdiff_t>(start + 1),
                     ids.begin() + static_cast<std::ptrdiff_t>(start + 1 + static_cast<std::size_t>(count)));
      row += count;
    }
    model.forward_batch(items);
    row_nll.assign(static_cast<std::size_t>(rows), 0.0);
    default_thread_pool().parallel_for(rows, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        row_nll[static_cast<std::size_t>(r)] =
            next_token_nll(logits.data() + r * vocab, vocab, targets[static_cast<std::size_t>(r)]);
    });
    row = 0;
    for (std::size_t k = 0; k < items.size(); ++k) {
      const std::size_t e = item_example[k];
      if (items[k].rows == model::LogitRows::All)
        for (std::size_t t = 0; t < items[k].tokens.size(); ++t) {
          const double nll = row_nll[static_cast<std::size_t>(row++)];
          sums[e] += nll;
          if (per_token) (*per_token)[e].push_back(nll);
        }
      fed[e] += items[k].tokens.size();
    }
  }
  return sums;
}

}  // namespace

int run_perplexity(const std::vector<std::string>& argv) {
  using Clock = std::chrono::steady_clock;
  try {
    Args args(argv, with_device_flags({"--help", "--json"}),
              {"--model", "--tokenizer", "--file", "--ids-file", "--ctx", "--batch", "--threads", "--device"});
    if (args.has("--help")) {
      std::fputs(kPerplexityUsage, stdout);
      return kExitOk;
    }
    if (!args.positionals().empty()) throw UsageError{"unexpected argument " + args.positionals().front()};
    const auto ids_file_name = args.get("--ids-file");
    const auto file_name = ids_file_name ? ids_file_name : args.get("--file");
    if (!file_name) throw UsageError{"--file or --ids-file is required (- reads stdin)"};
    if (ids_file_name && args.get("--file")) throw UsageError{"give one of --file and --ids-file"};
    const bool ids_mode = ids_file_name.has_value();
    const int64_t ctx = args.count("--ctx", 1024, 2);
    const int64_t batch = args.count("--batch", 8, 1);
    if (args.get("--threads"))
      setenv("DEEPINFER_THREADS", std::to_string(args.count("--threads", 1, 1)).c_str(), 1);
    const std::string device = device_option(args);
    const auto model_arg = args.get("--model");
    const std::string model_dir = model_arg ? *model_arg : default_model_dir();
    // Before loading, so a device that is not there fails at once.
    const backend::DeviceSpec device_spec = cli::device_spec(args);

    const auto start = Clock::now();
    if (!std::filesystem::is_directory(model_dir)) fail(model_dir, ": no such model folder (pass --model DIR)");
    // Token ids need no tokenizer: then only a V4.1 Engram model reads one (the folder's, or --tokenizer).
    const std::string tokenizer_path = args.get("--tokenizer").value_or(model_dir + "/tokenizer.json");
    if (!ids_mode && !args.get("--tokenizer") && !std::filesystem::exists(tokenizer_path))
      fail(model_dir, ": no tokenizer.json in the model folder; pass --tokenizer");
    model::LoadOptions load_options;
    load_options.tokenizer = ids_mode ? args.get("--tokenizer").value_or("") : tokenizer_path;
    model::Model model = model::Model::load(model_dir, load_options);
    std::fprintf(stderr, "deepinfer perplexity: %s\n", backend::attach_device(model, device_spec).c_str());
    const api::PromptFormat format =
        model.config().family == ModelFamily::V41 ? api::PromptFormat::V41 : api::PromptFormat::V4;

    std::ifstream file;
    const bool from_stdin = *file_name == "-";
    if (!from_stdin) {
      file.open(*file_name, std::ios::binary);
      if (!file) fail(*file_name, ": cannot open");
    }
    const std::string source = from_stdin ? std::string("stdin") : *file_name;
    std::istream& in = from_stdin ? std::cin : static_cast<std::istream&>(file);
    std::vector<Example> examples;
    if (ids_mode) {
      examples.push_back(read_ids_example(in, source, ctx, model.vocab_size()));
    } else {
      const api::PromptEncoder encoder(Tokenizer::from_file(tokenizer_path), format);
      examples = read_examples(in, source, encoder, format, ctx, model.vocab_size());
    }

    // Summed in file order whatever the batch, so the mean is the same to the bit.
    double total = 0.0;
    int64_t targets = 0;
    const bool progress = isatty(STDERR_FILENO) != 0;
    std::vector<float> logits;
    std::vector<std::vector<double>> per_token;  // --ids-file: the one example's target NLLs
    for (std::size_t begin = 0; begin < examples.size(); begin += static_cast<std::size_t>(batch)) {
      const auto group = std::span(examples).subspan(begin, std::min(examples.size() - begin, static_cast<std::size_t>(batch)));
      for (const double sum : score_group(model, group, logits, ids_mode ? &per_token : nullptr)) total += sum;
      for (const Example& example : group) targets += static_cast<int64_t>(example.ids.size() - example.first_target);
      if (progress && std::chrono::duration<double>(Clock::now() - start).count() > 2.0)
        std::fprintf(stderr, "\r[%zu / %zu examples]", begin + group.size(), examples.size());
    }
    if (progress && std::chrono::duration<double>(Clock::now() - start).count() > 2.0) std::fputs("\n", stderr);
    const double mean_nll = total / static_cast<double>(targets);
    const double perplexity = std::exp(mean_nll);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

    if (args.has("--json")) {
      nlohmann::ordered_json out = {{"file", source}, {"examples", examples.size()}, {"tokens", targets}};
      if (ids_mode) out["nll"] = per_token.front();
      out["mean_nll"] = mean_nll;
      out["perplexity"] = perplexity;
      out["ppl"] = perplexity;  // llama.cpp-style tools read this name
      out["seconds"] = seconds;
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      if (ids_mode) {
        const std::vector<int32_t>& ids = examples.front().ids;
        for (std::size_t t = 0; t < per_token.front().size(); ++t)
          std::printf("%zu %d %.6f\n", t + 1, ids[t + 1], per_token.front()[t]);
      }
      std::printf("%s: %zu examples, %lld target tokens, mean NLL %.4f, perplexity %.4f\n", source.c_str(),
                  examples.size(), static_cast<long long>(targets), mean_nll, perplexity);
    }
    return kExitOk;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepinfer perplexity: %s\n\n%s", e.message.c_str(), kPerplexityUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer perplexity: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli

// `deepinfer generate`: one prompt through a checkpoint on the CPU or a GPU (--device), token by
// token, printing text as it is produced. A direct look at the forward pass and the sampler,
// without the server.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/device.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "core/error.h"
#include "engine/counter_rng.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "engine/token_history.h"
#include "io/tokenizer/tokenizer.h"
#include "model/model.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kGenerateUsage =
    "usage: deepinfer generate [--model DIR] (--prompt TEXT | --ids JSON_ARRAY | --prompt-ids 1,2,3)\n"
    "                          [options]\n"
    "\n"
    "Runs the prompt through the model on the CPU or a GPU (--device), then samples up to\n"
    "--max-tokens tokens, printing the text as it is produced (ids when no tokenizer is\n"
    "available). The device line goes to stderr first.\n"
    "\n"
    "options:\n"
    "  --model DIR         checkpoint folder (config.json, *.safetensors; default: the embedded\n"
    "                      model, assets/models/deepinfer-mini-v41)\n"
    "  --tokenizer PATH    tokenizer.json (default: DIR/tokenizer.json when present)\n"
    "  --prompt TEXT       prompt text, encoded as is (no chat template)\n"
    "  --ids JSON_ARRAY    prompt token ids instead of text\n"
    "  --prompt-ids IDS    the same as comma-separated ids: --prompt-ids 1,2,3\n"
    "  --add-bos           put the tokenizer's BOS id first\n"
    "  --max-tokens N      tokens to generate (default 32); stops early at an EOS id\n"
    "  --ignore-eos        do not stop at EOS ids: always generate --max-tokens tokens\n"
    "  --device D          cpu, cuda or cuda:N (default: the first CUDA device when this build\n"
    "                      has the CUDA backend and a GPU answers, else cpu)\n"
    "  --enforce-eager     CUDA: launch each kernel of a decode step from the host instead of\n"
    "                      replaying the step's captured CUDA graph\n"
    "  --batch-invariant   CUDA: logits with the same bits alone or in any batch (fixed\n"
    "                      reduction orders; slower at small batches)\n"
    "  --temperature T     0 = greedy (default 0)\n"
    "  --top-p P, --top-k K, --min-p P   truncation, as in the OpenAI / vLLM APIs\n"
    "  --seed S            sampling seed (default: drawn, and printed with --json)\n"
    "  --json              print one JSON object (ids, text, seed, timings) at the end instead\n"
    "\n"
    "exit codes: 0 done, 1 bad model, prompt or parameters, 2 bad command line\n";

std::optional<Tokenizer> open_tokenizer(const Args& args, const std::string& model_dir) {
  if (auto path = args.get("--tokenizer")) return Tokenizer::from_file(*path);
  if (std::filesystem::exists(model_dir + "/tokenizer.json")) return Tokenizer::from_file(model_dir);
  return std::nullopt;
}

// --prompt-ids: "1,2,3" (spaces around an id allowed) -> ids.
std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, comma - start);
    const std::size_t first = item.find_first_not_of(' ');
    item = first == std::string::npos ? "" : item.substr(first, item.find_last_not_of(' ') - first + 1);
    if (item.empty() || item.size() > 10 || item.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(item) > INT32_MAX)
      fail("--prompt-ids: expected comma-separated token ids such as 1,2,3, got '", text, "'");
    ids.push_back(static_cast<int32_t>(std::stoll(item)));
    if (comma == text.size()) break;
    start = comma + 1;
  }
  return ids;
}

std::vector<int32_t> prompt_ids(const Args& args, const std::optional<Tokenizer>& tokenizer) {
  std::vector<int32_t> ids;
  if (args.has("--add-bos")) {
    if (!tokenizer || !tokenizer->bos_id()) fail("--add-bos: no tokenizer with a BOS token");
    ids.push_back(*tokenizer->bos_id());
  }
  if (auto text = args.get("--prompt")) {
    if (!tokenizer) fail("--prompt needs a tokenizer: the model folder has no tokenizer.json; pass --tokenizer or --ids");
    auto encoded = tokenizer->encode(*text);
    ids.insert(ids.end(), encoded.begin(), encoded.end());
  } else if (auto list = args.get("--prompt-ids")) {
    const std::vector<int32_t> given = parse_id_list(*list);
    ids.insert(ids.end(), given.begin(), given.end());
  } else {
    nlohmann::json parsed = nlohmann::json::parse(*args.get("--ids"), nullptr, false);
    if (!parsed.is_array() || parsed.empty()) fail("--ids: expected a non-empty JSON array of token ids");
    for (const auto& id : parsed) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        fail("--ids: ", id.dump(), " is not a token id");
      ids.push_back(id.get<int32_t>());
    }
  }
  if (ids.empty()) fail("the prompt is empty");
  return ids;
}

}  // namespace

int run_generate(const std::vector<std::string>& argv) {
  using Clock = std::chrono::steady_clock;
  try {
    Args args(argv, with_device_flags({"--help", "--add-bos", "--json", "--ignore-eos"}),
              {"--model", "--tokenizer", "--prompt", "--ids", "--prompt-ids", "--max-tokens", "--temperature",
               "--top-p", "--top-k", "--min-p", "--seed", "--device"});
    if (args.has("--help")) {
      std::fputs(kGenerateUsage, stdout);
      return kExitOk;
    }
    if (!args.positionals().empty()) throw UsageError{"unexpected argument " + args.positionals().front()};
    if (args.get("--prompt").has_value() + args.get("--ids").has_value() + args.get("--prompt-ids").has_value() != 1)
      throw UsageError{"give exactly one of --prompt, --ids and --prompt-ids"};
    const std::string device = device_option(args);
    const bool ignore_eos = args.has("--ignore-eos");
    const auto max_tokens = args.count("--max-tokens", 32);
    if (max_tokens < 0) throw UsageError{"--max-tokens must be >= 0"};

    engine::SamplingParams params;
    params.temperature = static_cast<float>(args.number("--temperature", 0.0));
    params.top_p = static_cast<float>(args.number("--top-p", 1.0));
    params.top_k = static_cast<int32_t>(args.count("--top-k", 0));
    params.min_p = static_cast<float>(args.number("--min-p", 0.0));
    if (args.get("--seed")) params.seed = static_cast<uint64_t>(args.count("--seed", 0));
    const uint64_t seed = params.seed.value_or(engine::draw_engine_seed());

    // After every usage check, so a bad command line exits 2 even when the embedded model is missing.
    auto given_model_dir = args.get("--model");
    const std::string model_dir = given_model_dir ? *given_model_dir : default_model_dir();
    // Before loading, so a device that is not there fails at once.
    const backend::DeviceSpec device_spec = cli::device_spec(args);

    const auto load_start = Clock::now();
    std::optional<Tokenizer> tokenizer = open_tokenizer(args, model_dir);
    model::LoadOptions load_options;
    if (auto path = args.get("--tokenizer")) load_options.tokenizer = *path;
    model::Model model = model::Model::load(model_dir, load_options);
    std::fprintf(stderr, "deepinfer generate: %s\n", backend::attach_device(model, device_spec).c_str());
    const int64_t vocab = model.config().vocab_size;
    engine::validate(params, vocab);
    std::vector<int32_t> ids = prompt_ids(args, tokenizer);
    for (int32_t id : ids)
      if (id >= vocab) fail("prompt token id ", id, " is outside the model's vocabulary (", vocab, ")");

    const auto prefill_start = Clock::now();
    model::SequenceState sequence = model.new_sequence();
    std::vector<float> logits(static_cast<std::size_t>(vocab));
    model.forward(sequence, ids, logits, model::ForwardOptions{.rows = model::LogitRows::Last});
    const auto decode_start = Clock::now();

    engine::TokenHistory history(ids);
    std::optional<IncrementalDetokenizer> detokenizer;
    if (tokenizer && !args.has("--json")) detokenizer.emplace(*tokenizer);
    std::vector<int32_t> generated;
    std::string finish_reason = "length";
    const auto& eos = model.config().eos_token_ids;
    for (int64_t step = 0; step < max_tokens; ++step) {
      const int64_t position = static_cast<int64_t>(ids.size() + generated.size());
      const int32_t token = engine::sample(logits, params, history, seed, /*request_id=*/0, position).token;
      generated.push_back(token);
      history.append(token);
      if (!ignore_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) {
        finish_reason = "stop";
        break;
      }
      if (detokenizer) {
        std::cout << detokenizer->push(token) << std::flush;
      } else if (!args.has("--json")) {
        std::cout << token << ' ' << std::flush;
      }
      if (step + 1 < max_tokens) model.forward(sequence, std::span(&token, 1), logits, model::LogitRows::Last);
    }
    if (detokenizer) std::cout << detokenizer->finish();
    const auto end = Clock::now();
    const auto seconds = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };

    if (args.has("--json")) {
      nlohmann::json out = {{"prompt_tokens", ids.size()},
                            {"ids", generated},
                            {"finish_reason", finish_reason},
                            {"seed", seed},
                            {"load_seconds", seconds(load_start, prefill_start)},
                            {"prefill_seconds", seconds(prefill_start, decode_start)},
                            {"decode_seconds", seconds(decode_start, end)}};
      if (tokenizer) out["text"] = tokenizer->decode(generated);
      std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    } else {
      std::cout << '\n';
      std::fprintf(stderr, "[%zu prompt tokens in %.3f s, %zu generated in %.3f s, finish: %s, seed %llu]\n",
                   ids.size(), seconds(prefill_start, decode_start), generated.size(), seconds(decode_start, end),
                   finish_reason.c_str(), static_cast<unsigned long long>(seed));
    }
    return kExitOk;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepinfer generate: %s\n\n%s", e.message.c_str(), kGenerateUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer generate: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli

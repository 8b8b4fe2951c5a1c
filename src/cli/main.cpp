// deepinfer command line: one subcommand per cli/cmd_*.cpp.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"

namespace {

struct Command {
  std::string_view name;
  std::string_view summary;
  int (*run)(const std::vector<std::string>& args);
};

constexpr Command kCommands[] = {
    {"tokenize", "text <-> token ids with a model's tokenizer", deepinfer::cli::run_tokenize},
    {"inspect", "describe a checkpoint folder: config, tensors, what is missing", deepinfer::cli::run_inspect},
    {"generate", "run one prompt through a model (CPU or GPU) and print the continuation", deepinfer::cli::run_generate},
    {"serve", "serve a model over HTTP (OpenAI / DeepSeek / Anthropic APIs)", deepinfer::cli::run_serve},
    {"render", "Chat Completions requests -> the served prompt text and ids (training data)", deepinfer::cli::run_render},
    {"perplexity", "mean NLL and perplexity of a model over a JSONL file (train.py's evaluation)", deepinfer::cli::run_perplexity},
    {"bench", "benchmark a running OpenAI-compatible server: TTFT, TPOT, ITL, throughput", deepinfer::cli::run_bench},
    {"grammar", "compile a JSON schema / regex / grammar, check instances token by token", deepinfer::cli::run_grammar},
    {"calibrate-confidence", "fit a DSpark drafter's confidence temperatures to a server's --confidence-log",
     deepinfer::cli::run_calibrate_confidence},
};

void print_usage(std::FILE* out) {
  std::fputs("usage: deepinfer <command> [options]\n\nDeepSeek V4 / V4.1 inference engine.\n\ncommands:\n", out);
  for (const auto& command : kCommands)
    std::fprintf(out, "  %-20.*s  %.*s\n", static_cast<int>(command.name.size()), command.name.data(),
                 static_cast<int>(command.summary.size()), command.summary.data());
  std::fputs("\nserve, generate, inspect and perplexity use the embedded model (assets/models/deepinfer-mini-v41)\n"
             "when no model folder is given.\n"
             "Run 'deepinfer <command> --help' for a command's options. 'deepinfer --version' prints the version.\n"
             "Exit codes: 0 done, 1 the command failed (bad input or files), 2 bad command line.\n",
             out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return deepinfer::cli::kExitUsage;
  }
  std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return deepinfer::cli::kExitOk;
  }
  if (name == "--version") {
    std::printf("deepinfer %s\n", DEEPINFER_VERSION);
    return deepinfer::cli::kExitOk;
  }
  for (const auto& command : kCommands)
    if (command.name == name) return command.run(std::vector<std::string>(argv + 2, argv + argc));
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return deepinfer::cli::kExitUsage;
}

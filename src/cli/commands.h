#pragma once
// Each subcommand takes its arguments (after the subcommand name) and returns the process exit code.
#include <string>
#include <vector>

namespace deepinfer::cli {

// Exit codes scripts can rely on.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,  // the command ran and failed: unreadable or corrupt input, bad data
  kExitUsage = 2,    // the command line was wrong
};

int run_tokenize(const std::vector<std::string>& args);
int run_inspect(const std::vector<std::string>& args);
int run_generate(const std::vector<std::string>& args);
int run_serve(const std::vector<std::string>& args);
int run_render(const std::vector<std::string>& args);
int run_perplexity(const std::vector<std::string>& args);
int run_bench(const std::vector<std::string>& args);
int run_grammar(const std::vector<std::string>& args);
int run_calibrate_confidence(const std::vector<std::string>& args);

// The bundled assets folder: $DEEPINFER_ASSET_DIR, else the source tree's assets/ this binary was
// built from, else ../assets next to the executable.
std::string asset_dir();

// The embedded model, asset_dir()/models/deepinfer-mini-v41: what serve, generate, inspect and
// perplexity use when no model folder is given. Throws deepinfer::Error naming the folder when it
// has no config.json; `how_to_choose` (e.g. "--model DIR") tells the user how to name another model.
std::string default_model_dir(const std::string& how_to_choose = "--model DIR");

}  // namespace deepinfer::cli

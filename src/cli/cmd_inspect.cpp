// `deepinfer inspect`: what a checkpoint folder holds, checked against what its config.json says
// the architecture needs, so a broken or partial download is found before a long load.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/checkpoint_match.h"
#include "io/model_config.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kInspectUsage =
    "usage: deepinfer inspect [MODEL_DIR] [--tensors] [--json]\n"
    "\n"
    "Reads MODEL_DIR's config.json and safetensors headers (no weights are loaded) and prints the\n"
    "model's description, its tensors' totals, and every tensor that is missing, mis-shaped or\n"
    "unexpected for the architecture. MODEL_DIR defaults to the embedded model,\n"
    "assets/models/deepinfer-mini-v41.\n"
    "\n"
    "options:\n"
    "  --tensors   also list every tensor: stored name, canonical name, dtype, shape, bytes\n"
    "  --json      print one JSON object instead of text\n"
    "\n"
    "exit codes: 0 the checkpoint is complete, 1 unreadable or incomplete (a required tensor is\n"
    "missing or has the wrong dtype or shape), 2 bad command line\n";

constexpr std::size_t kListedProblems = 20;

struct Report {
  std::string path;
  std::string description;
  std::size_t shards = 0;
  CheckpointMatch match;
};

Report inspect(const std::string& path) {
  ModelConfig config = load_model_config(path);
  Checkpoint checkpoint = Checkpoint::open(path);
  return Report{path, describe(config), checkpoint.shards().size(), match_checkpoint(config, checkpoint)};
}

void print_list(const char* title, const std::vector<std::string>& items) {
  if (items.empty()) return;
  std::printf("%s: %zu\n", title, items.size());
  for (std::size_t i = 0; i < items.size() && i < kListedProblems; ++i) std::printf("  %s\n", items[i].c_str());
  if (items.size() > kListedProblems) std::printf("  ... and %zu more\n", items.size() - kListedProblems);
}

void print_text(const Report& report, bool list_tensors) {
  std::printf("%s\n%s", report.path.c_str(), report.description.c_str());
  std::printf("tensors: %zu in %zu shard(s), %.3f GB, %.4g B parameters\n", report.match.tensors.size(), report.shards,
              static_cast<double>(report.match.total_bytes) / 1e9, static_cast<double>(report.match.parameters) / 1e9);
  if (list_tensors) {
    for (const auto& tensor : report.match.tensors) {
      std::string canonical =
          tensor.canonical_name.empty() || tensor.canonical_name == tensor.stored_name ? "" : " -> " + tensor.canonical_name;
      std::printf("  %s%s  %s %s %zu\n", tensor.stored_name.c_str(), canonical.c_str(),
                  std::string(dtype_name(tensor.dtype)).c_str(), shape_string(tensor.shape).c_str(), tensor.bytes);
    }
  }
  print_list("missing", report.match.missing);
  if (report.match.missing_optional > 0) std::printf("optional tensors absent: %zu\n", report.match.missing_optional);
  print_list("wrong dtype or shape", report.match.mismatched);
  print_list("unexpected", report.match.unexpected);
  std::printf("%s\n", report.match.complete() ? "complete" : "INCOMPLETE");
}

void print_json(const Report& report, bool list_tensors) {
  nlohmann::json out = {
      {"path", report.path},
      {"description", report.description},
      {"shards", report.shards},
      {"tensor_count", report.match.tensors.size()},
      {"total_bytes", report.match.total_bytes},
      {"parameters", report.match.parameters},
      {"missing", report.match.missing},
      {"missing_optional", report.match.missing_optional},
      {"mismatched", report.match.mismatched},
      {"unexpected", report.match.unexpected},
      {"complete", report.match.complete()},
  };
  if (list_tensors) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& tensor : report.match.tensors)
      tensors.push_back({{"name", tensor.stored_name},
                         {"canonical", tensor.canonical_name},
                         {"dtype", dtype_name(tensor.dtype)},
                         {"shape", tensor.shape},
                         {"bytes", tensor.bytes}});
    out["tensors"] = std::move(tensors);
  }
  std::cout << out.dump(2) << '\n';
}

}  // namespace

int run_inspect(const std::vector<std::string>& argv) {
  try {
    Args args(argv, {"--help", "--tensors", "--json"}, {});
    if (args.has("--help")) {
      std::fputs(kInspectUsage, stdout);
      return kExitOk;
    }
    if (args.positionals().size() > 1) throw UsageError{"expected at most one MODEL_DIR"};
    Report report = inspect(args.positionals().empty() ? default_model_dir("MODEL_DIR") : args.positionals().front());
    if (args.has("--json")) {
      print_json(report, args.has("--tensors"));
    } else {
      print_text(report, args.has("--tensors"));
    }
    return report.match.complete() ? kExitOk : kExitFailure;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepinfer inspect: %s\n\n%s", e.message.c_str(), kInspectUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer inspect: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli

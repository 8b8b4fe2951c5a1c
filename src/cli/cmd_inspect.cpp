// `deepinfer inspect`: what a checkpoint folder holds, checked against what its config.json says
// the architecture needs, so a broken or partial download is found before a long load.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/checkpoint_schema.h"
#include "io/model_config.h"
#include "io/tensor_names.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer inspect MODEL_DIR [--tensors] [--json]\n"
    "\n"
    "Reads MODEL_DIR's config.json and safetensors headers (no weights are loaded) and prints the\n"
    "model's description, its tensors' totals, and every tensor that is missing, mis-shaped or\n"
    "unexpected for the architecture.\n"
    "\n"
    "options:\n"
    "  --tensors   also list every tensor: stored name, canonical name, dtype, shape, bytes\n"
    "  --json      print one JSON object instead of text\n"
    "\n"
    "exit codes: 0 the checkpoint is complete, 1 unreadable or incomplete (a required tensor is\n"
    "missing or has the wrong dtype or shape), 2 bad command line\n";

constexpr std::size_t kListedProblems = 20;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

struct StoredTensor {
  std::string stored_name;
  std::string canonical_name;  // empty when unknown or a fused expert stack
  DType dtype;
  std::vector<int64_t> shape;
  std::size_t bytes;
};

struct Report {
  std::string path;
  std::string description;
  std::size_t shards = 0;
  std::size_t total_bytes = 0;
  int64_t parameters = 0;  // logical parameters of the tensors present (scales excluded)
  std::vector<StoredTensor> tensors;
  std::vector<std::string> missing;           // required and absent
  std::size_t missing_optional = 0;           // e.g. MTP layers a checkpoint may leave out
  std::vector<std::string> mismatched;        // present with the wrong dtype or shape
  std::vector<std::string> unexpected;        // stored names the architecture has no place for
  bool complete() const { return missing.empty() && mismatched.empty(); }
};

bool dtype_allowed(const ExpectedTensor& expected, DType dtype) {
  for (DType allowed : expected.stored_dtypes)
    if (allowed == dtype) return true;
  return false;
}

std::string dtype_list(const ExpectedTensor& expected) {
  std::string out;
  for (DType dtype : expected.stored_dtypes) out += (out.empty() ? "" : "|") + std::string(dtype_name(dtype));
  return out;
}

Report inspect(const std::string& path) {
  Report report;
  report.path = path;
  ModelConfig config = load_model_config(path);
  report.description = describe(config);
  Checkpoint checkpoint = Checkpoint::open(path);
  report.shards = checkpoint.shards().size();

  std::map<std::string, const ExpectedTensor*> expected;
  std::vector<ExpectedTensor> schema = expected_tensors(config);
  for (const auto& tensor : schema) expected.emplace(tensor.name, &tensor);

  std::set<std::string> present;
  for (const auto& entry : checkpoint.tensors()) {
    const TensorInfo& info = *entry.info;
    StoredTensor stored{info.name, "", info.dtype, info.shape, info.byte_size()};
    report.total_bytes += stored.bytes;
    auto canonical = canonical_tensor_name(info.name);
    if (canonical && canonical->is_fused()) {
      // A transformers-style stack [experts, rows, cols] stands for one canonical tensor per expert.
      int64_t experts = info.shape.empty() ? 0 : info.shape[0];
      for (const auto& part : canonical->fused_parts)
        for (int64_t e = 0; e < experts; ++e) present.insert(expert_part_name(part, e));
      int64_t numel = 1;
      for (int64_t d : info.shape) numel *= d;
      report.parameters += numel;
    } else if (canonical && expected.contains(canonical->name)) {
      const ExpectedTensor& want = *expected.at(canonical->name);
      stored.canonical_name = canonical->name;
      present.insert(canonical->name);
      if (!dtype_allowed(want, info.dtype) || info.shape != want.stored_shape) {
        report.mismatched.push_back(str_cat(info.name, ": ", dtype_name(info.dtype), " ", shape_string(info.shape),
                                            ", expected ", dtype_list(want), " ", shape_string(want.stored_shape)));
      }
      if (!want.is_scale) report.parameters += logical_numel(want);
    } else {
      report.unexpected.push_back(str_cat(info.name, " (", dtype_name(info.dtype), " ", shape_string(info.shape), ")"));
    }
    report.tensors.push_back(std::move(stored));
  }
  for (const auto& tensor : schema) {
    if (present.contains(tensor.name)) continue;
    if (tensor.optional) {
      ++report.missing_optional;
    } else {
      report.missing.push_back(str_cat(tensor.name, " (", dtype_list(tensor), " ", shape_string(tensor.stored_shape), ")"));
    }
  }
  return report;
}

void print_list(const char* title, const std::vector<std::string>& items) {
  if (items.empty()) return;
  std::printf("%s: %zu\n", title, items.size());
  for (std::size_t i = 0; i < items.size() && i < kListedProblems; ++i) std::printf("  %s\n", items[i].c_str());
  if (items.size() > kListedProblems) std::printf("  ... and %zu more\n", items.size() - kListedProblems);
}

void print_text(const Report& report, bool list_tensors) {
  std::printf("%s\n%s", report.path.c_str(), report.description.c_str());
  std::printf("tensors: %zu in %zu shard(s), %.3f GB, %.4g B parameters\n", report.tensors.size(), report.shards,
              static_cast<double>(report.total_bytes) / 1e9, static_cast<double>(report.parameters) / 1e9);
  if (list_tensors) {
    for (const auto& tensor : report.tensors) {
      std::string canonical =
          tensor.canonical_name.empty() || tensor.canonical_name == tensor.stored_name ? "" : " -> " + tensor.canonical_name;
      std::printf("  %s%s  %s %s %zu\n", tensor.stored_name.c_str(), canonical.c_str(),
                  std::string(dtype_name(tensor.dtype)).c_str(), shape_string(tensor.shape).c_str(), tensor.bytes);
    }
  }
  print_list("missing", report.missing);
  if (report.missing_optional > 0) std::printf("optional tensors absent: %zu\n", report.missing_optional);
  print_list("wrong dtype or shape", report.mismatched);
  print_list("unexpected", report.unexpected);
  std::printf("%s\n", report.complete() ? "complete" : "INCOMPLETE");
}

void print_json(const Report& report, bool list_tensors) {
  nlohmann::json out = {
      {"path", report.path},
      {"description", report.description},
      {"shards", report.shards},
      {"tensor_count", report.tensors.size()},
      {"total_bytes", report.total_bytes},
      {"parameters", report.parameters},
      {"missing", report.missing},
      {"missing_optional", report.missing_optional},
      {"mismatched", report.mismatched},
      {"unexpected", report.unexpected},
      {"complete", report.complete()},
  };
  if (list_tensors) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& tensor : report.tensors)
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
      std::fputs(kUsage, stdout);
      return kExitOk;
    }
    if (args.positionals().size() != 1) throw UsageError{"expected one MODEL_DIR"};
    Report report = inspect(args.positionals().front());
    if (args.has("--json")) {
      print_json(report, args.has("--tensors"));
    } else {
      print_text(report, args.has("--tensors"));
    }
    return report.complete() ? kExitOk : kExitFailure;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepinfer inspect: %s\n\n%s", e.message.c_str(), kUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer inspect: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli

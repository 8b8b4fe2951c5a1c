// `deepinfer calibrate-confidence`: fits the per-position temperatures of a DSpark drafter's
// confidence head (sequential temperature scaling, engine/confidence_calibration.h) to the rounds
// a server recorded with --confidence-log, prints how calibrated the head was before and after,
// and with --write stores the temperatures in the model's config.json.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/confidence_calibration.h"
#include "engine/confidence_log.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kCalibrateUsage =
    "usage: deepinfer calibrate-confidence --log FILE [--model DIR --write] [--json]\n"
    "\n"
    "Fits the DSpark drafter's confidence temperatures (one per draft position: sequential\n"
    "temperature scaling, DeepSeek's STS) to the verifications recorded by\n"
    "  deepinfer serve --speculative static --confidence-log FILE\n"
    "under a representative load (e.g. `deepinfer bench` over your prompts). Position k's\n"
    "temperature is chosen from 41 values in [0.1, 10] so that the product of the first k\n"
    "confidences matches how often the first k drafts were all kept (the expected calibration\n"
    "error over 15 bins, minimised position by position). Confidence-scheduled verification\n"
    "(--speculative scheduled) ranks and prices drafts by those products.\n"
    "\n"
    "Prints per position: rounds, the observed survival, the mean predicted survival and the\n"
    "calibration error before and after, the ranking AUC and the temperature; then the config\n"
    "line.\n"
    "\n"
    "options:\n"
    "  --log FILE    the recorded rounds (JSON lines: {\"raw\": [...], \"accepted\": k})\n"
    "  --model DIR   the model folder whose config.json --write updates (its\n"
    "                dspark_block_size must equal the log's block size)\n"
    "  --write       store the temperatures in DIR/config.json as dspark_confidence_temperatures\n"
    "  --json        print the fit as one JSON object instead of a table\n"
    "\n"
    "exit codes: 0 fitted, 1 unreadable or inconsistent log or config, 2 bad command line\n";

nlohmann::json fit_json(const engine::ConfidenceCalibration& fit) {
  nlohmann::json positions = nlohmann::json::array();
  for (const engine::PositionCalibration& p : fit.positions)
    positions.push_back({{"rounds", p.rounds},
                         {"observed_survival", p.observed_survival},
                         {"predicted_before", p.predicted_before},
                         {"predicted_after", p.predicted_after},
                         {"calibration_error_before", p.error_before},
                         {"calibration_error_after", p.error_after},
                         {"auc", p.auc},
                         {"temperature", p.temperature}});
  return {{"dspark_confidence_temperatures", fit.temperatures}, {"positions", positions}};
}

// Rewrites the config with the temperatures, keeping its key order and everything else.
void write_temperatures(const std::string& model_dir, const std::vector<double>& temperatures) {
  const std::filesystem::path path = std::filesystem::path(model_dir) / "config.json";
  nlohmann::ordered_json config;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path.string(), ": cannot open");
    config = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  if (!config.is_object()) fail(path.string(), ": not a JSON object");
  // The drafter's fields sit beside the text parameters: in text_config where the config nests
  // them (DeepseekV41Config), else at the top.
  const auto text = config.find("text_config");
  nlohmann::ordered_json& fields = text != config.end() && text->is_object() ? *text : config;
  const auto block = fields.find("dspark_block_size");
  if (block == fields.end() || !block->is_number_integer())
    fail(path.string(), ": no dspark_block_size (the model has no DSpark drafter)");
  if (block->get<int64_t>() != static_cast<int64_t>(temperatures.size()))
    fail(path.string(), ": dspark_block_size is ", block->get<int64_t>(), " but the log's blocks have ",
         temperatures.size(), " drafts");
  fields["dspark_confidence_temperatures"] = temperatures;
  // Written beside and renamed over, so a failed write leaves the old config whole.
  const std::filesystem::path temporary = path.string() + ".calibrating";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << config.dump(2) << '\n';
    if (!out) fail(temporary.string(), ": cannot write");
  }
  std::filesystem::rename(temporary, path);
}

}  // namespace

int run_calibrate_confidence(const std::vector<std::string>& argv) {
  try {
    Args args(argv, {"--help", "--write", "--json"}, {"--log", "--model"});
    if (args.has("--help")) {
      std::fputs(kCalibrateUsage, stdout);
      return kExitOk;
    }
    if (!args.positionals().empty()) throw UsageError{"unexpected argument " + args.positionals().front()};
    const auto log = args.get("--log");
    if (!log) throw UsageError{"--log FILE is required"};
    const auto model_dir = args.get("--model");
    if (args.has("--write") && !model_dir) throw UsageError{"--write needs --model DIR"};

    const std::vector<engine::ConfidenceRound> rounds = engine::read_confidence_log(*log);
    if (rounds.empty()) fail(*log, ": no rounds recorded");
    const auto block_size = static_cast<int64_t>(rounds.front().raw.size());
    const engine::ConfidenceCalibration fit = engine::fit_confidence_temperatures(rounds, block_size);
    if (args.has("--json")) {
      std::printf("%s\n", fit_json(fit).dump(2).c_str());
    } else {
      std::printf("%zu rounds of %lld drafts\n", rounds.size(), static_cast<long long>(block_size));
      std::printf("%-8s %10s %10s %10s %9s %9s %6s %11s\n", "position", "observed", "before", "after", "ECE bef.",
                  "ECE aft.", "AUC", "temperature");
      for (std::size_t k = 0; k < fit.positions.size(); ++k) {
        const engine::PositionCalibration& p = fit.positions[k];
        std::printf("%-8zu %10.4f %10.4f %10.4f %9.4f %9.4f %6.3f %11.4f\n", k + 1, p.observed_survival,
                    p.predicted_before, p.predicted_after, p.error_before, p.error_after, p.auc, p.temperature);
      }
      std::printf("\"dspark_confidence_temperatures\": %s\n", nlohmann::json(fit.temperatures).dump().c_str());
    }
    if (args.has("--write")) {
      write_temperatures(*model_dir, fit.temperatures);
      std::fprintf(stderr, "deepinfer calibrate-confidence: wrote dspark_confidence_temperatures to %s/config.json\n",
                   model_dir->c_str());
    }
    return kExitOk;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "deepinfer calibrate-confidence: %s\n\n%s", e.message.c_str(), kCalibrateUsage);
    return kExitUsage;
  } catch (const Error& e) {
    std::fprintf(stderr, "deepinfer calibrate-confidence: %s\n", e.what());
    return kExitFailure;
  } catch (const std::filesystem::filesystem_error& e) {
    std::fprintf(stderr, "deepinfer calibrate-confidence: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace deepinfer::cli

#include "engine/confidence_log.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer::engine {

ConfidenceLog::ConfidenceLog(const std::string& path) : out_(path, std::ios::app), path_(path) {
  if (!out_) fail(path, ": cannot open the confidence log for writing");
}

void ConfidenceLog::write(const ConfidenceRound& round) {
  nlohmann::json line = {{"raw", round.raw}, {"accepted", round.accepted}};
  const std::lock_guard lock(mutex_);
  // Flushed per line: a server stopped by a signal keeps every round it verified.
  out_ << line.dump() << std::endl;
  if (!out_) fail(path_, ": writing the confidence log failed");
}

std::vector<ConfidenceRound> read_confidence_log(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open the confidence log");
  std::vector<ConfidenceRound> rounds;
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const auto bad = [&](const char* what) { fail(path, ":", line, ": ", what); };
    if (!json.is_object()) bad("not a JSON object");
    const auto raw = json.find("raw");
    const auto accepted = json.find("accepted");
    if (raw == json.end() || !raw->is_array() || raw->empty()) bad("\"raw\" must be a non-empty array of numbers");
    if (accepted == json.end() || !accepted->is_number_integer()) bad("\"accepted\" must be an integer");
    ConfidenceRound round;
    for (const nlohmann::json& value : *raw) {
      if (!value.is_number()) bad("\"raw\" must be a non-empty array of numbers");
      const double number = value.get<double>();
      if (!std::isfinite(number)) bad("a raw confidence is not finite");
      round.raw.push_back(static_cast<float>(number));
    }
    const auto kept = accepted->get<int64_t>();
    if (kept < 0 || kept > static_cast<int64_t>(round.raw.size())) bad("\"accepted\" is outside 0 .. the block size");
    round.accepted = static_cast<int32_t>(kept);
    rounds.push_back(std::move(round));
  }
  return rounds;
}

}  // namespace deepinfer::engine

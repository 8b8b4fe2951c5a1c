#pragma once
// The confidence head's record of live verification, for its calibration
// (engine/confidence_calibration.h): one JSON line per verification of a whole draft block,
// {"raw": [c_raw_1, ..., c_raw_gamma], "accepted": k}. The engine writes it under
// --confidence-log (docs/ENGINE.md); `deepinfer calibrate-confidence` reads it.
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "engine/confidence_calibration.h"

namespace deepinfer::engine {

class ConfidenceLog {
 public:
  // Appends to `path` (created if absent). Throws deepinfer::Error when it cannot be opened.
  explicit ConfidenceLog(const std::string& path);
  void write(const ConfidenceRound& round);

 private:
  std::mutex mutex_;
  std::ofstream out_;
  std::string path_;
};

// Every round of a log; throws deepinfer::Error naming the line of anything malformed.
std::vector<ConfidenceRound> read_confidence_log(const std::string& path);

}  // namespace deepinfer::engine

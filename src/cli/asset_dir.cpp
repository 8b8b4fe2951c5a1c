#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"

namespace deepinfer::cli {

std::string asset_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("DEEPINFER_ASSET_DIR"); env != nullptr && *env != '\0') return env;
  if (fs::is_directory(DEEPINFER_ASSET_DIR)) return DEEPINFER_ASSET_DIR;
  std::error_code error;
  fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    fs::path beside = exe.parent_path().parent_path() / "assets";
    if (fs::is_directory(beside)) return beside.string();
  }
  return DEEPINFER_ASSET_DIR;
}

std::string default_model_dir() { return asset_dir() + "/models/deepinfer-mini-v41"; }

}  // namespace deepinfer::cli

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"

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

std::string default_model_dir(const std::string& how_to_choose) {
  std::string dir = asset_dir() + "/models/deepinfer-mini-v41";
  if (!std::filesystem::exists(dir + "/config.json"))
    fail("no model given and the embedded model is missing (", dir, "/config.json does not exist): pass ",
         how_to_choose);
  return dir;
}

}  // namespace deepinfer::cli

#include "server/process_sockets.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace deepinfer::server {

int find_socket(const std::function<bool(int fd)>& visit) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    const std::string name = entry.path().filename().string();
    char* end = nullptr;
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0') continue;
    struct stat info {};
    if (::fstat(static_cast<int>(fd), &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    if (visit(static_cast<int>(fd))) return static_cast<int>(fd);
  }
  return -1;
}

}  // namespace deepinfer::server

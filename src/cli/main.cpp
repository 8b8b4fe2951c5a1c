// deepinfer command line: dispatches to one subcommand per file (cli/cmd_*.cpp).
#include <cstdio>
#include <cstring>
#include <string_view>

namespace {

constexpr const char* kUsage =
    "usage: deepinfer <command> [options]\n"
    "\n"
    "DeepSeek V4 / V4.1 inference engine.\n"
    "\n"
    "commands:\n"
    "  --version   print the version\n"
    "\n"
    "Run 'deepinfer <command> --help' for a command's options.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::string_view(argv[1]) == "--version") {
    std::printf("deepinfer %s\n", DEEPINFER_VERSION);
    return 0;
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n\n%s", argv[1], kUsage);
  return 2;
}

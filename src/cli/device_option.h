#pragma once
// `--device cpu|cuda[:N]`, shared by generate, perplexity and serve. The value is checked here as
// a command line (a malformed one is a UsageError, exit 2), then resolved by
// backend::parse_device (backend/device.h): a device this build or machine does not have is a
// deepinfer::Error (exit 1) that says what exists.
#include <set>
#include <string>

#include "backend/device.h"
#include "cli/args.h"

namespace deepinfer::cli {

// --device's value: "" when absent (parse_device's default: the first CUDA device when this build
// has the CUDA backend and a GPU answers, else the CPU). Throws UsageError for anything but cpu,
// cuda, cuda:N or auto.
std::string device_option(const Args& args);

// The flags beside --device that every command taking it accepts: --enforce-eager (CUDA: no
// graphs) and --batch-invariant.
inline std::set<std::string> with_device_flags(std::set<std::string> flags) {
  flags.insert({"--enforce-eager", "--batch-invariant"});
  return flags;
}
// --device resolved by backend::parse_device, with --enforce-eager and --batch-invariant.
backend::DeviceSpec device_spec(const Args& args);

}  // namespace deepinfer::cli

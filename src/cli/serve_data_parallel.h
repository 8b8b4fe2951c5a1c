#pragma once
// `deepinfer serve --data-parallel N`: the command lines of the N engine ranks the front starts,
// and where each runs. Used by cmd_serve.cpp only.
#include <set>
#include <string>
#include <vector>

#include "backend/device.h"

namespace deepinfer::cli {

struct RankPlacement {
  std::string device;  // --device of each rank
  int threads = 1;     // --threads of each rank (its CPU compute threads)
};

// `--device cuda` (or the default on a machine with GPUs): rank i on cuda:(i mod the devices),
// one rank per GPU while there are enough; `--device cuda:K`: every rank on GPU K (they share
// it); the CPU: the compute threads (`threads`, else the cores) split evenly, one at least each.
std::vector<RankPlacement> place_ranks(int ranks, const std::string& device_option, const backend::DeviceSpec& spec,
                                       int threads);

// The serve command line of rank `placement`: the front's own arguments less those the front
// keeps (--data-parallel, --host, --port, --device, --threads, --api-key, --keep-alive-timeout,
// --max-connections), plus loopback on any free port, its device and threads, and a long
// keep-alive (the front pools its connections). `valued` are the options that take a value.
std::vector<std::string> rank_arguments(const std::vector<std::string>& argv, const std::set<std::string>& valued,
                                        const RankPlacement& placement);

}  // namespace deepinfer::cli

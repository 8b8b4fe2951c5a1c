#pragma once
// `--device cpu|cuda[:N]`: which backend a command runs the model on. The default is the first
// CUDA device when this build has the CUDA backend and the machine has a GPU, else the CPU.
#include <string>

#include "model/model.h"

namespace deepinfer::backend {

struct DeviceSpec {
  enum class Kind { Cpu, Cuda };
  Kind kind = Kind::Cpu;
  int index = 0;  // CUDA device ordinal
  // CUDA only (the CPU backend is eager and batch invariant by construction):
  bool cuda_graphs = true;       // off: --enforce-eager
  bool batch_invariant = false;  // --batch-invariant
};

// Parses "cpu", "cuda" or "cuda:N"; "" or "auto" gives the default above. Anything else, a CUDA
// device this build or machine does not have, is an Error that says what exists.
DeviceSpec parse_device(const std::string& text);

// Whether this build has the CUDA backend and at least one CUDA device answers.
bool cuda_device_present();
// How many CUDA devices answer (0 in a build without the CUDA backend).
int cuda_device_count();

// Attaches the backend `spec` names to `model` (uploading its weights for a GPU). Returns the
// line a command prints at start: the device, its memory and the model's footprint there.
// A model that does not fit is an Error with the numbers. max_rows: the most rows one forward
// call will have (the engine's --max-batch-tokens); the GPU's activation memory is sized for it.
std::string attach_device(model::Model& model, const DeviceSpec& spec, int64_t max_rows = 512);

}  // namespace deepinfer::backend

#include "backend/device.h"

#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear_cpu.h"
#ifdef DEEPINFER_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace deepinfer::backend {
namespace {

[[maybe_unused]] std::string gib(int64_t bytes) {  // CUDA builds only
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

}  // namespace

int cuda_device_count() {
#ifdef DEEPINFER_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

bool cuda_device_present() { return cuda_device_count() > 0; }

DeviceSpec parse_device(const std::string& text) {
  if (text.empty() || text == "auto") {
    if (cuda_device_present()) return {DeviceSpec::Kind::Cuda, 0};
    return {DeviceSpec::Kind::Cpu, 0};
  }
  if (text == "cpu") return {DeviceSpec::Kind::Cpu, 0};
  if (text != "cuda" && text.rfind("cuda:", 0) != 0) fail("--device ", text, ": expected cpu, cuda or cuda:N");
  int index = 0;
  if (text.size() > 5) {
    const std::string digits = text.substr(5);
    if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos)
      fail("--device ", text, ": expected cuda:N with N a device number");
    index = std::stoi(digits);
  }
#ifdef DEEPINFER_HAVE_CUDA
  const int count = cuda::device_count();
  if (count == 0) fail("--device ", text, ": no CUDA device answers on this machine (use --device cpu)");
  if (index >= count) fail("--device ", text, ": this machine has ", count, " CUDA device(s), cuda:0 .. cuda:", count - 1);
  return {DeviceSpec::Kind::Cuda, index};
#else
  (void)index;  // checked for its form, as with CUDA
  fail("--device ", text, ": this build has no CUDA backend (configure with -DDEEPINFER_CUDA=ON where nvcc exists)");
#endif
}

std::string attach_device(model::Model& model, const DeviceSpec& spec, [[maybe_unused]] int64_t max_rows) {
  if (spec.kind == DeviceSpec::Kind::Cpu) {
    model.set_backend(model::cpu_backend());
    // Resolving the path here also refuses a bad DEEPINFER_CPU_ISA before the server starts.
    return std::string("device: cpu (") + kernels::cpu::linear_path_name(kernels::cpu::default_linear_path()) +
           " kernels, " + std::to_string(default_thread_pool().size()) + " threads)";
  }
#ifdef DEEPINFER_HAVE_CUDA
  cuda::Options options;
  options.cuda_graphs = spec.cuda_graphs;
  options.batch_invariant = spec.batch_invariant;
  const cuda::Attached attached = cuda::make_backend(model, spec.index, max_rows, options);
  model.set_backend(attached.backend);
  const cuda::DeviceInfo info = cuda::device_info(spec.index);
  std::string line = "device: " + attached.backend->name() + ", " + gib(info.free_bytes) + " free of " +
                     gib(info.total_bytes) + " after loading; weights " + gib(attached.weight_bytes) +
                     " and activations " + gib(attached.activation_bytes) + " on the device; " +
                     (spec.cuda_graphs ? "decode steps replay CUDA graphs" : "eager (no CUDA graphs)") +
                     (spec.batch_invariant ? "; batch invariant" : "");
  return line;
#else
  fail("--device cuda: this build has no CUDA backend");
#endif
}

}  // namespace deepinfer::backend

#include "backend/cuda/step_graphs.h"

namespace deepinfer::backend::cuda {
namespace {

// Graphs kept at most: (batch sizes) x (context doublings) stays far below this in practice; past
// it every graph is dropped (and recaptured on use) rather than device memory growing without bound.
constexpr std::size_t kMaxGraphs = 512;

}  // namespace

int64_t batch_bucket(int64_t rows) {
  if (rows <= 0 || rows > 512) return 0;
  if (rows <= 2) return rows;
  if (rows <= 4) return 4;
  return (rows + 7) / 8 * 8;
}

int64_t context_bound_for(int64_t max_length) {
  int64_t bound = 1024;
  while (bound < max_length) bound *= 2;
  return bound;
}

StepGraphs::~StepGraphs() {
  for (auto& [key, entry] : entries_) drop(entry);
}

void StepGraphs::drop(Entry& entry) {
  if (entry.graph) cudaGraphExecDestroy(entry.graph);
  entry.graph = nullptr;
}

PassMode StepGraphs::mode_for(const GraphKey& key, uint64_t generation) {
  const auto found = entries_.find(key);
  if (found == entries_.end()) return PassMode::Warmup;
  Entry& entry = found->second;
  if (entry.generation != generation) {  // the arena moved since: warm up again
    drop(entry);
    entry.warmed = false;
    entry.generation = generation;
    return PassMode::Warmup;
  }
  if (entry.graph) return PassMode::Replay;
  return entry.warmed ? PassMode::Capture : PassMode::Warmup;
}

void StepGraphs::warmed(const GraphKey& key, uint64_t generation) {
  Entry& entry = entries_[key];
  entry.generation = generation;
  entry.warmed = true;
}

void StepGraphs::store(const GraphKey& key, uint64_t generation, cudaGraphExec_t graph) {
  std::size_t held = 0;
  for (const auto& [other, entry] : entries_) held += entry.graph ? 1 : 0;
  if (held >= kMaxGraphs)
    for (auto& [other, entry] : entries_) drop(entry);
  Entry& entry = entries_[key];
  drop(entry);
  entry.generation = generation;
  entry.warmed = true;
  entry.graph = graph;
}

cudaGraphExec_t StepGraphs::graph(const GraphKey& key) const {
  const auto found = entries_.find(key);
  return found == entries_.end() ? nullptr : found->second.graph;
}

}  // namespace deepinfer::backend::cuda

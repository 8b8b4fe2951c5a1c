#pragma once
// CUDA graphs for decode steps (docs/ARCHITECTURE.md, "CUDA backend: graphs"). A decode step of n
// sequences whose longest context fits a bound C, over cache blocks of one size, always launches
// the same kernels with the same sizes once its variable parts are fixed: the rows padded to a
// batch bucket B >= n (padding rows: token 0 at position 0, attending to nothing, their cache
// writes skipped, their logits never read), entry lists padded to one slot per row, index
// scores strided by C / ratio, block tables padded to C / block_tokens. Such a step is keyed by
// (B, C, block size); the first pass of a key runs eagerly at those fixed sizes (the warm-up: every arena
// buffer reaches its size), the second is captured, and every later one replays the graph: the
// host only writes the step's metadata into the staging area (staging.h) and launches it.
//
// A graph holds device addresses: the arena's buffers, the staging chunks, the weights. Passes
// alternate between two staging banks (so the host can fill pass N + 1's while pass N's copies are
// still queued), and a graph reads one bank's chunks: the bank is part of the key. The
// staging chunks and the weights never move; an arena buffer that grows moves, so every graph
// records the arena generation it was captured at and is dropped when the arena has grown since.
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <utility>

namespace deepinfer::backend::cuda {

enum class PassMode {
  Eager,    // any call: sizes exact, kernels launched as the host code runs
  Warmup,   // a decode step's first pass at its key's fixed sizes, launched eagerly
  Capture,  // the second: the stream captures the kernels into the key's graph, launched at the end
  Replay,   // later ones: kernels skipped (kernels/cuda/launch_gate.h), the key's graph launched
};

struct GraphKey {
  int64_t rows = 0;           // the batch bucket: sequences, one row each, then padding rows
  int64_t context_bound = 0;  // C: every sequence's length after the step is at most C
  int64_t block_tokens = 0;   // the cache layout (region offsets and block tables follow it)
  int bank = 0;               // the staging bank its copies read (CudaBackend's banks alternate)
  auto operator<=>(const GraphKey&) const = default;
};

// The batch bucket of a decode step of `rows` sequences, the rows its graph computes: 1, 2, 4,
// then multiples of 8 up to 512 (vLLM's capture sizes); 0 past 512 (such steps run eagerly).
int64_t batch_bucket(int64_t rows);

// The context bound of a step whose longest sequence reaches `max_length` tokens: a power of two,
// at least 1024, so that a growing context recaptures only at doublings.
int64_t context_bound_for(int64_t max_length);

class StepGraphs {
 public:
  StepGraphs() = default;
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // What the next decode pass of `key` does, the arena being at `generation`.
  PassMode mode_for(const GraphKey& key, uint64_t generation);
  // A warm-up of `key` finished.
  void warmed(const GraphKey& key, uint64_t generation);
  // The key's captured graph (owned from now on), and the one to launch for a replay.
  void store(const GraphKey& key, uint64_t generation, cudaGraphExec_t graph);
  cudaGraphExec_t graph(const GraphKey& key) const;

  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t generation = 0;
    bool warmed = false;
    cudaGraphExec_t graph = nullptr;
  };
  void drop(Entry& entry);

  std::map<GraphKey, Entry> entries_;
};

}  // namespace deepinfer::backend::cuda

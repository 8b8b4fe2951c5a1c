// The CUDA backend's coarse operations (model/backend.h) over the kernels of kernels/cuda
// (docs/ARCHITECTURE.md, "CUDA backend"): the residual streams, mHC, the MoE layers, the embedding,
// the head and the whole of attention (projections, the window, the compressors and indexers, the
// sink softmax over the cache: device_attention.cpp) run on the GPU, with the weights uploaded
// once, the activations in one arena, the per-sequence state (device_layer_state.h) and the cache
// blocks (cache_memory.h) in device memory. Engram still runs on the host's CPU code between a
// download and an upload of the streams (its tables are host memory by design).
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <deque>
#include <optional>
#include <unordered_map>

#include "backend/cuda/arena_slots.h"
#include "backend/cuda/cache_memory.h"
#include "backend/cuda/device_attention.h"
#include "backend/cuda/device_layer_state.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/linear_runner.h"
#include "backend/cuda/op_profile.h"
#include "backend/cuda/side_branch.h"
#include "backend/cuda/staging.h"
#include "backend/cuda/step_graphs.h"
#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/sampler_kernels.h"
#include "io/model_config.h"
#include "model/engram.h"

namespace deepinfer::backend::cuda {
namespace {

namespace k = kernels::cuda;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(status));
}

class CudaBackend;

// What the host writes for one pass and the device reads after the host has moved on: the staging
// area (the pass's metadata). The backend has two and passes alternate, so the host fills pass
// N + 1's while pass N's copies are still queued; `done` (recorded at the end of each pass) tells
// when a bank is free again.
struct PassBank {
  Staging staging;
  cudaEvent_t done = nullptr;
};

// The most draws a pass may leave on the device for a chained pass to read (BatchItem::last_token_draw).
constexpr int64_t kChainedDrawCapacity = 16384;

// Where one pass's draws go: their ids on the device (what a pass chained on it reads) and their
// results back in pinned host memory, with the event that says they are there. Owned by the
// pass's PendingDraws until it is read, so that other passes (another thread's, between two of
// the engine's) cannot overwrite them; then back to the backend's free list.
struct DrawSlot {
  DrawSlot();
  ~DrawSlot();
  DrawSlot(const DrawSlot&) = delete;
  DrawSlot& operator=(const DrawSlot&) = delete;
  void reserve(int64_t draws);
  DeviceBuffer tokens;                                 // kChainedDrawCapacity ids
  kernels::cuda::SampleRowResult* results = nullptr;  // pinned host memory
  std::size_t capacity = 0;
  cudaEvent_t done = nullptr;
};

// The most columns of any weight matrix the device holds (for_each_device_tensor's walk).
int64_t widest_matrix(const model::Model& model);

class CudaForwardPass final : public model::ForwardPass {
 public:
  CudaForwardPass(CudaBackend& backend, const model::PassShape& shape, const model::CallShape& call);
  // A pass whose rows reach no head returns with its kernels still queued: wait for them, so the
  // caller's next look at the sequences (a snapshot, a free) sees a finished step. A failure
  // stays recorded on the stream and is raised by the next checked call; a capture cut short by
  // one is abandoned.
  ~CudaForwardPass() override;

  void embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens, std::span<const int32_t> from_draw,
             const model::PendingDraws* draw_source) override;
  void engram(const model::Engram& engram, int index, std::span<const int64_t> hash_ids) override;
  void enter_site(const model::HyperConnectionWeights& hc, std::span<const float> norm) override;
  void attention(const model::AttentionWeights& weights, std::span<const model::AttentionSegment> segments) override;
  void moe(const model::MoeWeights& weights, std::span<const int32_t> token_ids,
           std::vector<model::Routing>* routing) override;
  void exit_site() override;
  void drop_front_rows(int64_t rows) override;
  void restart_window(model::AttentionState& state, int64_t first_position) override {
    attention_.restart_window(state, first_position);
  }
  void read_streams(std::span<float> out) override;
  void tap_streams(int64_t tap, int64_t taps, std::span<float> out) override;
  void finish_taps() override;
  void head(const model::HeadWeights& weights, std::span<const int64_t> rows, float* logits,
            std::vector<float>* hidden) override;
  void collapse_head(const model::HeadWeights& weights, std::span<const int64_t> rows, float* collapsed) override;
  void draft_attention(const model::AttentionWeights& weights,
                       std::span<const model::AttentionSegment> segments) override;
  void greedy_draft_head(const model::DraftHeadWeights& weights, std::span<const int32_t> anchors, int64_t gamma,
                         std::span<int32_t> tokens, std::span<float> confidence_raw) override;
  void head_draw(const model::HeadWeights& weights, std::span<const int64_t> rows,
                 std::span<const model::TokenDraw> draws, std::span<model::DrawnToken> drawn,
                 const std::function<void()>* before_read, std::unique_ptr<model::PendingDraws>* pending) override;

 private:
  float* streams() const { return streams_ + first_ * shape_.hc.streams * shape_.hc.hidden; }
  float* carried_pre() const { return carried_pre_ + first_ * shape_.hc.streams; }
  // The site's mix from flattened, unit-RMS streams projected by fn: pre / post / comb.
  // normed: flat already holds the streams' RMSNorm (the exit before made it). On `lane`'s stream.
  void mix(const model::HyperConnectionWeights& hc, const float* streams, int64_t rows, float* flat, float* logits,
           bool normed = false, Lane lane = Lane::Main);
  SideLane side_lane() const;  // the pass's side branch (side_branch.h)
  SideLane mix_lane() const;   // the pass's mix lane
  // The main stream waits for the open mix branch, if any: before anything reads or writes what
  // it writes (the streams' exits, the pre, post and comb, the flat rows) or moves the rows.
  void join_mix() {
    if (!mix_branch_) return;
    mix_branch_->join();
    mix_branch_.reset();
  }
  // The branches still open joined (the mix lane's, the attention's window store) and the site
  // exit that exit_site left to the next enter_site (V4.1: one launch for the boundary) run
  // alone: before anything else reads or writes the streams or moves the rows.
  void settle();
  void run_exit();
  void expert_ffn(const model::ExpertWeights& expert, const float* x, int64_t rows, float limit, float* out,
                  const LinearRunner& linear);
  // An attention sublayer's parts on the device: the projections of sublayer_in_ (the low-rank
  // query, the heads normed and rotated, the K = V row normed and rotated) and the grouped output
  // projection of the attended rows [rows_, heads * d] into sublayer_out_.
  struct Projections {
    float* q_residual;
    float* q;
    float* kv;
  };
  Projections project_attention(const model::AttentionWeights& weights, const int32_t* device_positions);
  void output_attention(const model::AttentionWeights& weights, const float* attended);
  void sync();
  // The end of a graph pass's device work (the head's logits): a capture becomes the key's graph
  // and runs; a replay runs the key's graph.
  void finish_graph();
  // A captured graph's copy of the pass's staged bytes, ahead of every node the capture made.
  cudaError_t copy_staging_first(cudaGraph_t graph);
  template <typename T>
  T* put(const std::vector<T>& values);
  // Per-row values of the call, padded to the bucket's rows with `fill` (as they are otherwise).
  template <typename T>
  std::vector<T> padded(std::span<const T> values, T fill) const;
  // The head's rows collapsed (before the final norm) on the device, [*count, D]; *count is the
  // rows padded to the pass's bucket.
  float* collapsed_rows(const model::HeadWeights& weights, std::span<const int64_t> rows, int64_t* count);
  // The head's logits [rows, vocab] on the device (hidden_out: the head's input, downloaded).
  float* head_logits(const model::HeadWeights& weights, std::span<const int64_t> rows,
                     std::vector<float>* hidden_out);

  CudaBackend& backend_;
  std::unique_lock<std::mutex> lock_;
  int bank_index_;
  PassBank& bank_;
  bool pending_ = false;  // head_draw handed its draws out unread: the pass ends without waiting
  model::PassShape shape_;
  GraphKey key_;
  PassMode mode_ = PassMode::Eager;
  std::optional<k::SkipLaunches> skip_;  // while a replay's host code runs
  bool capturing_ = false;
  bool finished_ = false;  // the pass reached its head
  uint64_t arena_generation_ = 0;  // at the pass's start
  // The rows the pass computes: the call's, or (a graph's key) its batch bucket, whose rows past
  // live_rows_ are padding (token 0 at position 0, attending to nothing, never read back).
  int64_t rows_;
  int64_t live_rows_;
  int64_t first_ = 0;  // rows dropped from the front
  LinearRunner linear_;
  LinearRunner side_linear_;
  LinearRunner mix_linear_;
  // V4.1's projection and mix of the open site, queued on the mix lane (enter_site) and joined
  // before the site's exit (join_mix).
  std::optional<SideBranch> mix_branch_;
  bool exit_pending_ = false;  // V4.1: the last exit_site's work, left for the next enter_site
  float* streams_ = nullptr;
  float* sublayer_in_ = nullptr;
  float* sublayer_out_ = nullptr;
  float* carried_pre_ = nullptr;
  // kFlat holds the current streams' RMSNorm, made by the last exit_site for the next enter_site;
  // whatever else writes the streams (embed, engram) or moves their rows clears it.
  bool flat_ready_ = false;
  float* pre_ = nullptr;
  float* post_ = nullptr;
  float* comb_ = nullptr;
  int32_t* token_ids_ = nullptr;  // the rows' ids on the device (embed), read again by hash routing
  // DSpark taps kept on the device until finish_taps, and where they go then.
  float* device_taps_ = nullptr;
  std::span<float> host_taps_;
  DeviceAttention attention_;
};

// A chained pass's draws (head_draw with `pending`): their results come back into the bank's
// pinned buffer behind the pass's kernels; wait() reads them once the bank's event has fired.
class CudaPendingDraws final : public model::PendingDraws {
 public:
  CudaPendingDraws(CudaBackend& backend, std::unique_ptr<DrawSlot> slot, int64_t vocab, std::vector<int64_t> positions)
      : backend_(backend), slot_(std::move(slot)), vocab_(vocab), positions_(std::move(positions)) {}
  ~CudaPendingDraws() override;
  void wait(std::span<model::DrawnToken> drawn) override;
  const int32_t* device_tokens() const { return static_cast<const int32_t*>(slot_->tokens.data()); }

 private:
  CudaBackend& backend_;
  std::unique_ptr<DrawSlot> slot_;
  int64_t vocab_;
  std::vector<int64_t> positions_;  // each draw's position, for the error it may raise
};

// drawn[i] from the sampler's results[i], or the Error the CPU's sampler would throw.
void read_drawn(const k::SampleRowResult* results, std::span<const int64_t> positions, int64_t vocab,
                std::span<model::DrawnToken> drawn) {
  for (std::size_t i = 0; i < drawn.size(); ++i) {
    const k::SampleRowResult& result = results[i];
    switch (result.error) {
      case k::kSampleOk: break;
      case k::kSampleNoFiniteMaximum: fail("sampler: the largest logit is not finite; sampling needs a finite maximum");
      case k::kSampleIdOutsideVocabulary:
        fail("sampler: a token id in the history or logit_bias is outside the vocabulary of ", vocab, " logits");
      case k::kSamplePositionOutOfRange:
        fail("sampler: position ", positions[i], " is outside [0, 2^32) and cannot key the random stream");
      default: fail("sampler: the device sampler failed (error ", result.error, ")");
    }
    model::DrawnToken& out = drawn[i];
    out.token = result.token;
    out.logprob = result.logprob;
    out.top_logprobs.clear();
    for (int32_t j = 0; j < result.top_count; ++j) out.top_logprobs.emplace_back(result.top_tokens[j], result.top_logprobs[j]);
  }
}

class CudaBackend final : public model::Backend {
 public:
  CudaBackend(int device, std::string name, const Options& options)
      : device_(device), name_(std::move(name)), options_(options) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamCreateWithFlags(&setup_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    for (LaneResources& lane : lanes_) {
      check(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), "cudaStreamCreate");
      check(cudaEventCreateWithFlags(&lane.fork, cudaEventDisableTiming), "cudaEventCreate");
      check(cudaEventCreateWithFlags(&lane.join, cudaEventDisableTiming), "cudaEventCreate");
    }
    cache_memory_.emplace(device_, stream_, mutex_, "cuda:" + std::to_string(device_));
    tile_counters_ = DeviceBuffer(static_cast<std::size_t>(k::kLinearMmaTileCounters) * sizeof(uint32_t));
    check(cudaMemset(tile_counters_.data(), 0, tile_counters_.bytes()), "cudaMemset");
    for (LaneResources& lane : lanes_) {
      lane.tile_counters = DeviceBuffer(tile_counters_.bytes());
      check(cudaMemset(lane.tile_counters.data(), 0, lane.tile_counters.bytes()), "cudaMemset");
    }
    for (PassBank& bank : banks_) check(cudaEventCreateWithFlags(&bank.done, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~CudaBackend() override {
    graphs_.reset();
    for (const TimedPass& pass : pass_events_) {
      if (pass.begin) cudaEventDestroy(pass.begin);
      if (pass.end) cudaEventDestroy(pass.end);
    }
    if (pass_trace_) std::fclose(pass_trace_);
    for (cudaEvent_t event : free_timing_events_) cudaEventDestroy(event);
    if (last_pass_end_) cudaEventDestroy(last_pass_end_);
    free_slots_.clear();
    for (PassBank& bank : banks_)
      if (bank.done) cudaEventDestroy(bank.done);
    for (LaneResources& lane : lanes_) {
      if (lane.fork) cudaEventDestroy(lane.fork);
      if (lane.join) cudaEventDestroy(lane.join);
      if (lane.stream) cudaStreamDestroy(lane.stream);
    }
    if (setup_stream_) cudaStreamDestroy(setup_stream_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  std::string name() const override { return name_; }
  bool draws_tokens() const override { return true; }
  bool chains_draws() const override { return true; }
  std::optional<model::DeviceTime> device_time() const override {
    const std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mutex_));
    const_cast<CudaBackend*>(this)->account_passes();
    return device_time_;
  }
  // A pass's first and last work on the stream (timing events recorded around it), for
  // device_time(): read once the device has done them.
  void pass_began(cudaEvent_t begin, int64_t rows, PassMode mode, bool pending) {
    pass_events_.push_back({begin, nullptr, rows, mode, pending});
  }
  // end null: its event could not be recorded (a failed pass); the pass is not counted.
  void pass_ended(cudaEvent_t end) {
    if (pass_events_.empty() || pass_events_.back().end) return;
    if (end) {
      pass_events_.back().end = end;
      return;
    }
    free_timing_events_.push_back(pass_events_.back().begin);
    pass_events_.pop_back();
  }
  void give_back_timing_event(cudaEvent_t event) { free_timing_events_.push_back(event); }
  void mark_pending() {
    if (!pass_events_.empty()) pass_events_.back().pending = true;
  }
  cudaEvent_t timing_event() {
    account_passes();
    if (!free_timing_events_.empty()) {
      cudaEvent_t event = free_timing_events_.back();
      free_timing_events_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    check(cudaEventCreate(&event), "cudaEventCreate");
    return event;
  }
  std::unique_ptr<model::ForwardPass> begin(const model::PassShape& shape, const model::CallShape& call) const override {
    // The pass holds the backend's lock: one pass at a time, on this backend's stream.
    return std::make_unique<CudaForwardPass>(const_cast<CudaBackend&>(*this), shape, call);
  }

  // How a pass of `call` runs (step_graphs.h); key: its graph's key when not Eager.
  PassMode mode_for(const model::CallShape& call, int bank, GraphKey& key) {
    if (!options_.cuda_graphs || !call.decode || profile_.enabled()) return PassMode::Eager;
    key = {batch_bucket(call.rows), context_bound_for(call.max_length), call.block_tokens, bank};
    if (key.rows == 0) return PassMode::Eager;
    return graphs_->mode_for(key, arena_.generation());
  }
  const model::CacheMemory& cache_memory() const override { return *cache_memory_; }
  void freeze_layers(std::vector<model::AttentionState>& layers) const override {
    const std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mutex_));
    check(cudaSetDevice(device_), "cudaSetDevice");
    auto ready = std::make_shared<ReadyEvent>();
    for (model::AttentionState& layer : layers)
      if (const auto* device = dynamic_cast<const DeviceLayerState*>(layer.backend.get()))
        layer.backend = device->frozen_copy(stream_, ready);
    check(cudaEventRecord(ready->event, stream_), "cudaEventRecord");
  }
  // A frozen copy is read on the setup stream once its copies are done, so that the read does not
  // wait for the passes issued after it froze.
  void download_layers(std::vector<model::AttentionState>& layers) const override {
    const std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mutex_));
    check(cudaSetDevice(device_), "cudaSetDevice");
    for (model::AttentionState& layer : layers) {
      const auto* device = dynamic_cast<const DeviceLayerState*>(layer.backend.get());
      if (!device) continue;
      if (const ReadyEvent* ready = device->ready()) {
        check(cudaStreamWaitEvent(setup_stream_, ready->event, 0), "cudaStreamWaitEvent");
        device->to_host(layer, setup_stream_);
      } else {
        device->to_host(layer, stream_);
      }
    }
  }
  // The host form a snapshot restored is the state now: the device copies are made from it again
  // on the layers' next use.
  void upload_layers(model::SequenceState& sequence) const override {
    const std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mutex_));
    check(cudaSetDevice(device_), "cudaSetDevice");
    for (model::AttentionState& layer : sequence.layers) layer.backend.reset();
  }

  // Sizes every arena buffer for calls of up to `rows` rows, so that a step of the engine's
  // largest batch allocates nothing (and a device too small for it fails here, at load).
  void reserve(const model::Model& model, int64_t rows);

  // 0, 1, ..., count - 1 on the device (x rows of linear_gathered calls that read their own row),
  // written only when a call needs more than any before (a warm-up, for a graph's keys).
  const int32_t* identity(int64_t count) {
    int32_t* device = arena_.get<int32_t>(kPairIdentity, static_cast<std::size_t>(count));
    if (count > identity_count_) {
      k::iota(device, count, stream_);
      identity_count_ = count;
    }
    return device;
  }

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cudaStream_t setup_stream() const { return setup_stream_; }
  // The events a pass forks its side branch from the stream with and joins it back by (one branch
  // open at a time).
  cudaEvent_t fork_event(Lane lane) const { return lanes_[lane_index(lane)].fork; }
  cudaEvent_t join_event(Lane lane) const { return lanes_[lane_index(lane)].join; }
  WeightStore& weights() { return weights_; }
  Arena& arena() { return arena_; }
  Arena& sampler_arena() { return sampler_arena_; }
  // The bank the next pass uses, once the pass that used it last is done on the device (a chained
  // pass's host work may run while the pass before it computes, never two passes ahead).
  int take_bank() {
    const int index = next_bank_;
    next_bank_ ^= 1;
    check(cudaEventSynchronize(banks_[index].done), "cudaEventSynchronize");
    return index;
  }
  PassBank& bank(int index) { return banks_[index]; }
  // A slot for a pass's draws, with room for `draws` results (from the free list when one is there).
  std::unique_ptr<DrawSlot> take_slot(int64_t draws) {
    std::unique_ptr<DrawSlot> slot;
    {
      const std::lock_guard lock(slots_mutex_);
      if (!free_slots_.empty()) {
        slot = std::move(free_slots_.back());
        free_slots_.pop_back();
      }
    }
    if (!slot) slot = std::make_unique<DrawSlot>();
    slot->reserve(draws);
    return slot;
  }
  // Back once its draws were read (or never will be: its event has fired or is waited for first).
  void give_back(std::unique_ptr<DrawSlot> slot) {
    const std::lock_guard lock(slots_mutex_);
    free_slots_.push_back(std::move(slot));
  }
  // The tensor-core linears' split input and partial sums for calls of up to `rows` rows, for
  // the stream and the side branch.
  void reserve_linear_buffers(int64_t rows) {
    if (simt_) return;
    const auto r = static_cast<std::size_t>(rows);
    for (const int slot : {kSplitInput, kSideSplitInput, kMixSplitInput})
      arena_.get<uint32_t>(slot, static_cast<std::size_t>(k::linear_split_words(rows, widest_matrix_)));
    for (const int slot : {kMmaPartials, kSideMmaPartials, kMixMmaPartials})
      arena_.get<float>(slot, r * static_cast<std::size_t>(k::kLinearMmaPartialFloatsPerToken));
  }
  // How the pass runs linear: the SIMT kernel's column ranges on blocks of their own where a call
  // is small (the same bits either way), the tensor cores unless DEEPINFER_CUDA_SIMT=1. A lane
  // other than the main stream's runs on its own stream with buffers and tile counters of its own.
  LinearRunner linear_runner(Lane lane = Lane::Main) {
    if (lane == Lane::Main)
      return LinearRunner(arena_, stream_, arena_.get<float>(kLinearSplit, static_cast<std::size_t>(k::kLinearSplitFloats)),
                          !simt_, static_cast<uint32_t*>(tile_counters_.data()));
    const bool side = lane == Lane::Side;
    LaneResources& resources = lanes_[lane_index(lane)];
    float* split = arena_.get<float>(side ? kSideLinearSplit : kMixLinearSplit,
                                     static_cast<std::size_t>(k::kLinearSplitFloats));
    return LinearRunner(arena_, resources.stream, split, !simt_, static_cast<uint32_t*>(resources.tile_counters.data()),
                        side ? LinearRunner::Slots{kSideSplitInput, kSideMmaPartials}
                             : LinearRunner::Slots{kMixSplitInput, kMixMmaPartials});
  }
  // The layer's routed experts all fit expert_mma.cu's kernels (decided once per layer, on the
  // device descriptors); DEEPINFER_CUDA_SIMT=1 keeps them, and every linear, on part 1's SIMT
  // kernels (for side-by-side benchmarks).
  bool experts_on_tensor_cores(const model::MoeWeights& moe) {
    if (simt_ || moe.experts.empty()) return false;
    const auto [found, inserted] = tensor_core_experts_.try_emplace(&moe, true);
    if (inserted)
      for (const model::ExpertWeights& expert : moe.experts)
        for (const kernels::WeightMatrix* w : {&expert.w1, &expert.w2, &expert.w3})
          found->second = found->second && k::expert_mma_supports(weights_.matrix(*w));
    if (!found->second)
      for (const model::ExpertWeights& expert : moe.experts)
        if (weights_.matrix(expert.w1).layout != kernels::WeightLayout::RowMajor)
          fail("CUDA backend: routed experts in expert tiles that the expert kernels do not take");
    return found->second;
  }
  // False under DEEPINFER_CUDA_SIMT=1: every kernel with a tensor-core and a SIMT form runs the SIMT one.
  bool tensor_cores() const { return !simt_; }
  bool batch_invariant() const { return options_.batch_invariant; }
  StepGraphs& graphs() { return *graphs_; }
  GraphCounts& graph_counts() { return graph_counts_; }
  GraphCounts graph_counts() const {
    const std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mutex_));
    return graph_counts_;
  }
  std::mutex& mutex() { return mutex_; }
  OpProfile& profile() { return profile_; }

 private:
  int device_;
  std::string name_;
  Options options_;
  cudaStream_t stream_ = nullptr;
  cudaStream_t setup_stream_ = nullptr;
  // The streams beside stream_ (side_branch.h): the side branch's and the mix lane's, each with
  // its fork and join events and linear_mma's tile counters (passes run one at a time).
  struct LaneResources {
    cudaStream_t stream = nullptr;
    cudaEvent_t fork = nullptr;
    cudaEvent_t join = nullptr;
    DeviceBuffer tile_counters;
  };
  static std::size_t lane_index(Lane lane) { return lane == Lane::Side ? 0 : 1; }
  std::array<LaneResources, 2> lanes_;
  WeightStore weights_;
  Arena arena_;
  DeviceBuffer tile_counters_;  // linear_mma's, for stream_
  // The sampler's buffers, apart: they follow the draws of a step (forks draw more), and a graph
  // never reads them, so their growth must not move the arena the graphs hold.
  Arena sampler_arena_;
  // The passes whose events the device has not reached yet, oldest first, and the last one's end.
  void account_passes() {
    while (!pass_events_.empty()) {
      const TimedPass pass = pass_events_.front();
      const cudaEvent_t begin = pass.begin, end = pass.end;
      if (!end || cudaEventQuery(end) != cudaSuccess) break;
      float busy_ms = 0, gap_ms = 0;
      if (cudaEventElapsedTime(&busy_ms, begin, end) == cudaSuccess) device_time_.busy_seconds += busy_ms * 1e-3;
      if (last_pass_end_ && cudaEventElapsedTime(&gap_ms, last_pass_end_, begin) == cudaSuccess && gap_ms > 0)
        device_time_.gap_seconds += gap_ms * 1e-3;
      ++device_time_.passes;
      if (pass_trace_)
        std::fprintf(pass_trace_, "%lld %lld %s %d %.3f %.3f\n", static_cast<long long>(device_time_.passes),
                     static_cast<long long>(pass.rows), mode_name(pass.mode), pass.pending ? 1 : 0, gap_ms, busy_ms);
      if (last_pass_end_) free_timing_events_.push_back(last_pass_end_);
      free_timing_events_.push_back(begin);
      last_pass_end_ = end;
      pass_events_.pop_front();
    }
    cudaGetLastError();  // a query's cudaErrorNotReady is not an error
  }
  struct TimedPass {
    cudaEvent_t begin = nullptr;
    cudaEvent_t end = nullptr;
    int64_t rows = 0;
    PassMode mode = PassMode::Eager;
    bool pending = false;
  };
  static const char* mode_name(PassMode mode) {
    switch (mode) {
      case PassMode::Eager: return "eager";
      case PassMode::Warmup: return "warmup";
      case PassMode::Capture: return "capture";
      case PassMode::Replay: return "replay";
    }
    return "?";
  }
  std::deque<TimedPass> pass_events_;
  // DEEPINFER_PASS_TRACE=FILE: one line per finished pass (index, rows, mode, draws left pending,
  // the gap before it and its span in ms): where the device waited (a development tool).
  std::FILE* pass_trace_ = [] {
    const char* path = std::getenv("DEEPINFER_PASS_TRACE");
    return path && *path ? std::fopen(path, "w") : nullptr;
  }();
  std::vector<cudaEvent_t> free_timing_events_;
  cudaEvent_t last_pass_end_ = nullptr;
  model::DeviceTime device_time_;
  PassBank banks_[2];
  int next_bank_ = 0;
  std::mutex slots_mutex_;  // free_slots_ (a PendingDraws gives its slot back outside any pass)
  std::vector<std::unique_ptr<DrawSlot>> free_slots_;
  std::optional<StepGraphs> graphs_{std::in_place};
  int64_t identity_count_ = 0;
  GraphCounts graph_counts_;
  std::optional<CudaCacheMemory> cache_memory_;
  std::mutex mutex_;
  OpProfile profile_;
  const bool simt_ = std::getenv("DEEPINFER_CUDA_SIMT") && *std::getenv("DEEPINFER_CUDA_SIMT") == '1';
  int64_t widest_matrix_ = 0;  // the most columns of any weight on the device (and the hidden size)
  std::unordered_map<const model::MoeWeights*, bool> tensor_core_experts_;
};

SideLane CudaForwardPass::side_lane() const {
  return {backend_.stream(), &side_linear_, backend_.fork_event(Lane::Side), backend_.join_event(Lane::Side)};
}

SideLane CudaForwardPass::mix_lane() const {
  return {backend_.stream(), &mix_linear_, backend_.fork_event(Lane::Mix), backend_.join_event(Lane::Mix)};
}

CudaForwardPass::CudaForwardPass(CudaBackend& backend, const model::PassShape& shape, const model::CallShape& call)
    : backend_(backend),
      lock_(backend.mutex()),
      bank_index_(backend.take_bank()),
      bank_(backend.bank(bank_index_)),
      shape_(shape),
      mode_(backend.mode_for(call, bank_index_, key_)),
      rows_(mode_ == PassMode::Eager ? call.rows : key_.rows),
      live_rows_(call.rows),
      linear_(backend.linear_runner()),
      side_linear_(backend.linear_runner(Lane::Side)),
      mix_linear_(backend.linear_runner(Lane::Mix)),
      attention_(backend.weights(), backend.arena(), bank_.staging, backend.stream(), backend.setup_stream(),
                 rows_, mode_ == PassMode::Eager ? 0 : key_.context_bound, linear_, side_lane(), backend.profile(),
                 backend.tensor_cores(),
                 /*range_keys=*/backend.batch_invariant() ? k::kInvariantRangeKeys : 0) {
  check(cudaSetDevice(backend_.device()), "cudaSetDevice");
  arena_generation_ = backend_.arena().generation();
  // A capture's puts reach the device through one copy at its graph's start (finish_graph).
  bank_.staging.reset(/*copying=*/mode_ == PassMode::Eager || mode_ == PassMode::Warmup);
  const cudaEvent_t began = backend_.timing_event();
  check(cudaEventRecord(began, backend_.stream()), "cudaEventRecord");
  backend_.pass_began(began, rows_, mode_, false);
  if (mode_ == PassMode::Capture) {
    // Relaxed: a layer state made for a sequence new to the device allocates and uploads on the
    // setup stream meanwhile (device_layer_state.h), outside the graph.
    check(cudaStreamBeginCapture(backend_.stream(), cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    capturing_ = true;
  }
  if (mode_ == PassMode::Replay) skip_.emplace();
  const auto n = static_cast<std::size_t>(shape.hc.streams);
  const auto d = static_cast<std::size_t>(shape.hc.hidden);
  const auto r = static_cast<std::size_t>(rows_);
  Arena& arena = backend_.arena();
  streams_ = arena.get<float>(kStreams, r * n * d);
  sublayer_in_ = arena.get<float>(kSublayerIn, r * d);
  sublayer_out_ = arena.get<float>(kSublayerOut, r * d);
  carried_pre_ = arena.get<float>(kCarriedPre, r * n);
  pre_ = arena.get<float>(kPre, r * n);
  post_ = arena.get<float>(kPost, r * n);
  comb_ = arena.get<float>(kComb, r * n * n);
  // The tensor-core buffers every linear of the pass shares, at their largest now: a buffer that
  // grew between two of the pass's calls would be freed under the earlier one's queued kernels.
  backend_.reserve_linear_buffers(rows_);
  if (shape.single_pass) {
    std::vector<float> one_hot(r * n, 0.0f);
    for (std::size_t t = 0; t < r; ++t) one_hot[t * n] = 1.0f;
    k::copy_floats(carried_pre_, put(one_hot), static_cast<int64_t>(one_hot.size()), backend_.stream());
  }
}

CudaForwardPass::~CudaForwardPass() {
  // The branches are joined inside the capture, before it ends, and the exit left for the next
  // site runs (a pass that reached no head): as the pass's other work, skipped in a replay, whose
  // graph holds them. A failure here is the pass's, raised where it happened; a mix branch that
  // settle() did not reach joins as it is dropped.
  try {
    settle();
  } catch (...) {
  }
  mix_branch_.reset();
  skip_.reset();
  if (capturing_) {
    cudaGraph_t abandoned = nullptr;
    (void)cudaStreamEndCapture(backend_.stream(), &abandoned);
    if (abandoned) cudaGraphDestroy(abandoned);
    cudaGetLastError();  // the capture's error is this pass's, already raised
  }
  (void)cudaEventRecord(bank_.done, backend_.stream());
  if (pending_) backend_.mark_pending();
  const cudaEvent_t ended = backend_.timing_event();
  const bool recorded = cudaEventRecord(ended, backend_.stream()) == cudaSuccess;
  if (!recorded) backend_.give_back_timing_event(ended);
  backend_.pass_ended(recorded ? ended : nullptr);
  if (!pending_) (void)cudaStreamSynchronize(backend_.stream());
  if (mode_ == PassMode::Warmup && finished_) backend_.graphs().warmed(key_, backend_.arena().generation());
}

void CudaForwardPass::sync() { check(cudaStreamSynchronize(backend_.stream()), "cudaStreamSynchronize"); }

template <typename T>
T* CudaForwardPass::put(const std::vector<T>& values) {
  return bank_.staging.put(values, backend_.stream());
}

template <typename T>
std::vector<T> CudaForwardPass::padded(std::span<const T> values, T fill) const {
  std::vector<T> out(values.begin(), values.end());
  if (static_cast<int64_t>(out.size()) == live_rows_) out.resize(static_cast<std::size_t>(rows_), fill);
  return out;
}

void CudaForwardPass::finish_graph() {
  finished_ = true;
  cudaStream_t stream = backend_.stream();
  if (mode_ == PassMode::Capture) {
    cudaGraph_t graph = nullptr;
    capturing_ = false;
    check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    cudaError_t status = copy_staging_first(graph);
    cudaGraphExec_t exec = nullptr;
    if (status == cudaSuccess) status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(status, "cudaGraphInstantiate");
    if (backend_.arena().generation() != arena_generation_) {  // its addresses are stale
      cudaGraphExecDestroy(exec);
      fail("CUDA backend: the activation arena grew while a decode step of ", key_.rows, " rows was captured");
    }
    // The captured kernels ran nowhere yet: launching the graph is this step's work too.
    backend_.graphs().store(key_, arena_generation_, exec);
    ++backend_.graph_counts().captured;
  }
  if (mode_ == PassMode::Replay) ++backend_.graph_counts().replayed;
  if (mode_ == PassMode::Capture || mode_ == PassMode::Replay) {
    skip_.reset();
    check(cudaGraphLaunch(backend_.graphs().graph(key_), stream), "cudaGraphLaunch");
  }
  bank_.staging.set_copying(true);  // what follows (the sampler) runs eagerly
}

cudaError_t CudaForwardPass::copy_staging_first(cudaGraph_t graph) {
  std::size_t root_count = 0;
  if (cudaError_t status = cudaGraphGetRootNodes(graph, nullptr, &root_count); status != cudaSuccess) return status;
  std::vector<cudaGraphNode_t> roots(root_count);
  if (cudaError_t status = cudaGraphGetRootNodes(graph, roots.data(), &root_count); status != cudaSuccess)
    return status;
  for (const Staging::Range& range : bank_.staging.written()) {
    cudaGraphNode_t copy = nullptr;
    if (cudaError_t status = cudaGraphAddMemcpyNode1D(&copy, graph, nullptr, 0, range.device, range.host, range.bytes,
                                                      cudaMemcpyHostToDevice);
        status != cudaSuccess)
      return status;
    for (cudaGraphNode_t root : roots)
      if (cudaError_t status = cudaGraphAddDependencies(graph, &copy, &root, nullptr, 1); status != cudaSuccess)
        return status;
  }
  return cudaSuccess;
}

void CudaForwardPass::embed(const kernels::WeightMatrix& table, std::span<const int32_t> tokens,
                            std::span<const int32_t> from_draw, const model::PendingDraws* draw_source) {
  settle();
  const OpProfile::Section timed(backend_.profile(), "embed", backend_.stream());
  // Every pass resolves its ids on the device, chained or not, so that a graph's kernels are the
  // same either way.
  std::vector<int32_t> sources(tokens.size(), -1);
  const int32_t* drawn = nullptr;  // read only where a row names a draw
  if (!from_draw.empty()) {
    const auto* source = dynamic_cast<const CudaPendingDraws*>(draw_source);
    if (!source) fail("CUDA backend: rows take their tokens from draws, but not from this backend's pending draws");
    drawn = source->device_tokens();
    if (from_draw.size() != tokens.size()) fail("CUDA backend: ", from_draw.size(), " draw sources for ", tokens.size(), " rows");
    for (int32_t draw : from_draw)
      if (draw >= kChainedDrawCapacity) fail("CUDA backend: a row reads draw ", draw, " of at most ", kChainedDrawCapacity);
    sources.assign(from_draw.begin(), from_draw.end());
  }
  const int32_t* staged = put(padded(tokens, int32_t{0}));
  const int32_t* device_sources = put(padded(std::span<const int32_t>(sources), int32_t{-1}));
  // The draws' address goes through staging too: a graph replays with each step's source.
  const int32_t* const* device_drawn = put(std::vector<const int32_t*>{drawn});
  const kernels::WeightMatrix& weights = backend_.weights().matrix(table);
  token_ids_ = backend_.arena().get<int32_t>(kTokenIds, static_cast<std::size_t>(rows_ + first_));
  k::resolve_token_ids(staged, device_sources, device_drawn, rows_, weights.rows, token_ids_, backend_.stream());
  flat_ready_ = false;
  k::embed(weights, token_ids_, rows_, shape_.hc.streams, streams(), backend_.stream());
}

void CudaForwardPass::engram(const model::Engram& engram, int index, std::span<const int64_t> hash_ids) {
  settle();
  const OpProfile::Section timed(backend_.profile(), "engram", backend_.stream());
  // The table rows are gathered on the host (the tables are host memory, read only where the
  // hashes point); the projection and the gate run here.
  std::vector<float> embedded = engram.gather(index, hash_ids, live_rows_ + first_);
  const int64_t width = static_cast<int64_t>(embedded.size()) / std::max<int64_t>(live_rows_ + first_, 1);
  embedded.resize(static_cast<std::size_t>((rows_ + first_) * width), 0.0f);  // a bucket's padding rows
  Arena& arena = backend_.arena();
  WeightStore& store = backend_.weights();
  cudaStream_t stream = backend_.stream();
  const model::EngramLayerWeights& layer = engram.layer(index);
  const float* rows = bank_.staging.put(
      std::span<const float>(embedded.data() + first_ * width, static_cast<std::size_t>(rows_ * width)), stream);
  float* kv = arena.get<float>(kEngramKv, static_cast<std::size_t>(rows_ * layer.wkv.rows));
  linear_(rows, rows_, store.matrix(layer.wkv), kv);
  flat_ready_ = false;
  k::engram_gate(streams(), kv, store.floats(engram.gate_weight(index)), rows_, shape_.hc.streams, shape_.hc.hidden,
                 engram.eps(), stream);
}

void CudaForwardPass::mix(const model::HyperConnectionWeights& hc, const float* streams, int64_t rows, float* flat,
                          float* logits, bool normed, Lane lane) {
  const int64_t width = shape_.hc.streams * shape_.hc.hidden;
  const LinearRunner& linear = lane == Lane::Mix ? mix_linear_ : linear_;
  if (!normed) k::rms_norm(streams, rows, width, nullptr, shape_.hc.norm_eps, flat, linear.stream());
  linear(flat, rows, backend_.weights().matrix(hc.fn), logits);
}

void CudaForwardPass::enter_site(const model::HyperConnectionWeights& hc, std::span<const float> norm) {
  const OpProfile::Section timed(backend_.profile(), "enter_site", backend_.stream());
  const int64_t n = shape_.hc.streams;
  const int64_t d = shape_.hc.hidden;
  const auto r = static_cast<std::size_t>(rows_);
  Arena& arena = backend_.arena();
  WeightStore& weights = backend_.weights();
  cudaStream_t stream = backend_.stream();
  float* flat = arena.get<float>(kFlat, r * static_cast<std::size_t>(n * d));
  float* logits = arena.get<float>(kMixLogits, r * static_cast<std::size_t>((2 + n) * n));
  join_mix();
  // V4.1 collapses with the site before's pre, so the sublayer's input does not wait for this
  // site's projection and mix: they run on the mix lane beside the sublayer (its output is all
  // the site's exit needs of them), forked once the collapse has read the carried pre that the
  // mix replaces. The same kernels on the same inputs as hc_enter: the same bits. The exit
  // before, where there is one, runs in the collapse's launch (hc_post_enter, the same bits).
  bool collapsed = false;
  if (shape_.single_pass && exit_pending_) {
    collapsed = k::hc_post_enter(post_, comb_, sublayer_out_, rows_, n, d, streams(), shape_.hc.norm_eps, flat,
                                 carried_pre(), weights.floats(norm), shape_.norm_eps, sublayer_in_, stream);
    if (collapsed) {
      exit_pending_ = false;
      flat_ready_ = true;
    }
  }
  settle();
  if (shape_.single_pass && !collapsed)
    collapsed = k::hc_collapse_norm(carried_pre(), streams(), rows_, n, d, weights.floats(norm), shape_.norm_eps,
                                    sublayer_in_, stream);
  if (collapsed) {
    mix_branch_.emplace(mix_lane());
    mix(hc, streams(), rows_, flat, logits, flat_ready_, Lane::Mix);
    flat_ready_ = false;
    k::hc_mix(logits, rows_, n, weights.floats(hc.base), weights.floats(hc.scale), shape_.hc.hc_eps,
              shape_.hc.sinkhorn_iters, carried_pre(), post_, comb_, mix_branch_->stream());
    return;
  }
  mix(hc, streams(), rows_, flat, logits, flat_ready_);
  flat_ready_ = false;
  if (k::hc_enter(logits, rows_, n, weights.floats(hc.base), weights.floats(hc.scale), shape_.hc.hc_eps,
                  shape_.hc.sinkhorn_iters, pre_, post_, comb_, shape_.single_pass ? carried_pre() : nullptr, streams(),
                  d, weights.floats(norm), shape_.norm_eps, sublayer_in_, stream))
    return;
  k::hc_mix(logits, rows_, n, weights.floats(hc.base), weights.floats(hc.scale), shape_.hc.hc_eps,
            shape_.hc.sinkhorn_iters, pre_, post_, comb_, stream);
  if (shape_.single_pass) {
    k::hc_collapse(carried_pre(), streams(), rows_, n, d, sublayer_in_, stream);
    k::copy_floats(carried_pre(), pre_, rows_ * n, stream);
  } else {
    k::hc_collapse(pre_, streams(), rows_, n, d, sublayer_in_, stream);
  }
  k::rms_norm(sublayer_in_, rows_, d, weights.floats(norm), shape_.norm_eps, sublayer_in_, stream);
}

void CudaForwardPass::exit_site() {
  settle();
  // V4.1: the next site's entry runs this exit in its own launch; whatever comes first settles it.
  if (shape_.single_pass) {
    exit_pending_ = true;
    return;
  }
  run_exit();
}

void CudaForwardPass::settle() {
  attention_.join_window_store();  // first: a failed mix join still leaves it joined
  join_mix();
  if (!exit_pending_) return;
  exit_pending_ = false;
  run_exit();
}

void CudaForwardPass::run_exit() {
  const OpProfile::Section timed(backend_.profile(), "exit_site", backend_.stream());
  const int64_t n = shape_.hc.streams, d = shape_.hc.hidden;
  // The next site's normed streams too, where one kernel does both (an exit is followed by the
  // next site's entry but at the pass's end).
  float* flat = backend_.arena().get<float>(kFlat, static_cast<std::size_t>(rows_ * n * d));
  flat_ready_ = k::hc_post_norm(post_, comb_, sublayer_out_, rows_, n, d, streams(), shape_.hc.norm_eps, flat,
                                backend_.stream());
  if (!flat_ready_) k::hc_post(post_, comb_, sublayer_out_, rows_, n, d, streams(), backend_.stream());
}

void CudaForwardPass::attention(const model::AttentionWeights& weights,
                                std::span<const model::AttentionSegment> segments) {
  Arena& arena = backend_.arena();
  cudaStream_t stream = backend_.stream();
  const int64_t heads = weights.heads;
  const int64_t d = weights.head_dim;
  const auto r = static_cast<std::size_t>(rows_);
  const std::vector<int64_t> positions = padded(std::span<const int64_t>(model::attention_positions(segments, live_rows_)), int64_t{0});
  const int32_t* device_positions = put(std::vector<int32_t>(positions.begin(), positions.end()));

  std::optional<OpProfile::Section> timed;
  timed.emplace(backend_.profile(), "attention.project", stream);
  const Projections projected = project_attention(weights, device_positions);

  timed.reset();
  timed.emplace(backend_.profile(), "attention.core", stream);
  float* attended = arena.get<float>(kAttended, r * static_cast<std::size_t>(heads * d));
  AttentionInputs inputs;
  inputs.x = sublayer_in_;
  inputs.q_residual = projected.q_residual;
  inputs.q = projected.q;
  inputs.kv = projected.kv;
  inputs.positions = device_positions;
  inputs.host_positions = positions;
  inputs.rows = rows_;
  inputs.first_row = first_;
  attention_.run(weights, segments, inputs, attended);
  timed.reset();
  timed.emplace(backend_.profile(), "attention.output", stream);
  output_attention(weights, attended);
}

CudaForwardPass::Projections CudaForwardPass::project_attention(const model::AttentionWeights& weights,
                                                                const int32_t* device_positions) {
  WeightStore& store = backend_.weights();
  Arena& arena = backend_.arena();
  cudaStream_t stream = backend_.stream();
  const int64_t heads = weights.heads;
  const int64_t d = weights.head_dim;
  const int64_t rank = weights.wq_a.rows;
  const auto r = static_cast<std::size_t>(rows_);
  float* q_residual = arena.get<float>(kQResidual, r * static_cast<std::size_t>(rank));
  float* q = arena.get<float>(kQuery, r * static_cast<std::size_t>(heads * d));
  float* kv = arena.get<float>(kKv, r * static_cast<std::size_t>(d));
  const float* inv_freq = store.floats(weights.rope.inv_freq());
  const int64_t rope_dims = weights.rope.rope_dims();
  // The K = V row beside the query's two projections.
  SideBranch side(side_lane());
  side.linear()(sublayer_in_, rows_, store.matrix(weights.wkv), kv);
  k::rms_norm_rope(kv, rows_, 1, d, store.floats(weights.kv_norm), weights.eps, rope_dims, inv_freq, device_positions,
                   side.stream());
  linear_(sublayer_in_, rows_, store.matrix(weights.wq_a), q_residual);
  k::rms_norm(q_residual, rows_, rank, store.floats(weights.q_norm), weights.eps, q_residual, stream);
  linear_(q_residual, rows_, store.matrix(weights.wq_b), q);
  if (weights.q_head_norm)
    k::rms_norm_rope(q, rows_, heads, d, nullptr, weights.eps, rope_dims, inv_freq, device_positions, stream);
  else
    k::rope(q, rows_, heads, d, rope_dims, inv_freq, device_positions, /*inverse=*/false, stream);
  side.join();
  return {q_residual, q, kv};
}

void CudaForwardPass::output_attention(const model::AttentionWeights& weights, const float* attended) {
  WeightStore& store = backend_.weights();
  Arena& arena = backend_.arena();
  cudaStream_t stream = backend_.stream();
  const int64_t heads = weights.heads;
  const int64_t d = weights.head_dim;
  // Grouped output: attended as [rows, groups, group_in]; group g's slice of wo_a takes slice g of
  // every row into low_rank [rows, groups, group_out], for wo_b.
  const auto groups = static_cast<int64_t>(weights.wo_a_groups.size());
  const int64_t group_in = heads * d / groups;
  const int64_t group_out = weights.wo_a_groups.front().rows;
  const int64_t pairs = rows_ * groups;
  float* low_rank = arena.get<float>(kLowRank, static_cast<std::size_t>(pairs * group_out));
  bool tensor_cores = true;
  for (const kernels::WeightMatrix& group : weights.wo_a_groups)
    tensor_cores = tensor_cores && linear_.runs_on_tensor_cores(store.matrix(group));
  if (tensor_cores) {
    // Every group in one launch where that kernel takes them (one split of the rows, one launch
    // instead of `groups` of each: 8 a layer in V4.1-Flash), else group by group.
    kernels::WeightMatrix first = store.matrix(weights.wo_a_groups.front());
    for (const kernels::WeightMatrix& group : weights.wo_a_groups) {
      first.no_nan_codes = first.no_nan_codes && store.matrix(group).no_nan_codes;
      first.max_e8m0 = std::max(first.max_e8m0, store.matrix(group).max_e8m0);
    }
    if (!linear_.grouped(attended, heads * d, rows_, first, store.find_descriptor_array(&weights.wo_a_groups), groups,
                         low_rank, groups * group_out))
      for (int64_t g = 0; g < groups; ++g)
        linear_.strided(attended + g * group_in, heads * d, rows_, store.matrix(weights.wo_a_groups[g]),
                        low_rank + g * group_out, groups * group_out);
    linear_(low_rank, rows_, store.matrix(weights.wo_b), sublayer_out_);
    return;
  }
  // Else linear_gathered over pairs run group by group (pair g * rows + t), which reads each
  // group's slice once per tile of rows instead of once per row, and a gather puts the results
  // back in row order.
  std::vector<int32_t> group_of(static_cast<std::size_t>(pairs)), input_row(static_cast<std::size_t>(pairs));
  std::vector<int64_t> pair_of(static_cast<std::size_t>(pairs));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t t = 0; t < rows_; ++t) {
      const auto p = static_cast<std::size_t>(g * rows_ + t);
      group_of[p] = static_cast<int32_t>(g);
      input_row[p] = static_cast<int32_t>(t * groups + g);
      pair_of[static_cast<std::size_t>(t * groups + g)] = static_cast<int64_t>(p);
    }
  float* by_group = arena.get<float>(kLowRankByGroup, static_cast<std::size_t>(pairs * group_out));
  const kernels::WeightMatrix* groups_device = store.find_descriptor_array(&weights.wo_a_groups);
  if (!groups_device) groups_device = store.descriptor_array(&weights.wo_a_groups, weights.wo_a_groups);
  k::linear_gathered(attended, put(input_row), pairs, groups_device, put(group_of), group_out, group_in, by_group,
                     stream);
  k::gather_rows(by_group, put(pair_of), pairs, group_out, low_rank, stream);
  linear_(low_rank, rows_, store.matrix(weights.wo_b), sublayer_out_);
}

void CudaForwardPass::expert_ffn(const model::ExpertWeights& expert, const float* x, int64_t rows, float limit,
                                 float* out, const LinearRunner& linear) {
  WeightStore& weights = backend_.weights();
  cudaStream_t stream = linear.stream();
  const int64_t inner = expert.w1.rows;
  const auto size = static_cast<std::size_t>(rows * inner);
  float* gate = backend_.arena().get<float>(kSharedGate, size);
  float* up = backend_.arena().get<float>(kSharedUp, size);
  linear(x, rows, weights.matrix(expert.w1), gate);
  linear(x, rows, weights.matrix(expert.w3), up);
  k::swiglu(gate, up, rows, inner, limit, nullptr, stream);
  linear(gate, rows, weights.matrix(expert.w2), out);
}

void CudaForwardPass::moe(const model::MoeWeights& weights, std::span<const int32_t> token_ids,
                          std::vector<model::Routing>* routing) {
  const OpProfile::Section timed(backend_.profile(), "moe", backend_.stream());
  WeightStore& store = backend_.weights();
  Arena& arena = backend_.arena();
  cudaStream_t stream = backend_.stream();
  const int64_t experts = weights.gate.rows;
  const int64_t d = shape_.hc.hidden;
  const int64_t top_k = weights.top_k;
  const int64_t pairs = rows_ * top_k;
  const auto r = static_cast<std::size_t>(rows_);

  (void)token_ids;  // the same ids are on the device since embed
  const int32_t* ids = token_ids_ + first_;
  // The shared expert beside the router and the routed experts; joined for the combine.
  float* shared = nullptr;
  std::optional<SideBranch> side;
  if (!weights.shared.empty()) {
    if (weights.shared.size() != 1) fail("CUDA backend: ", weights.shared.size(), " shared experts (one is supported)");
    shared = arena.get<float>(kSharedOut, r * static_cast<std::size_t>(d));
    side.emplace(side_lane());
    expert_ffn(weights.shared.front(), sublayer_in_, rows_, weights.swiglu_limit, shared, side->linear());
  }

  float* router = arena.get<float>(kRouterLogits, r * static_cast<std::size_t>(experts));
  linear_(sublayer_in_, rows_, store.matrix(weights.gate), router);
  k::RouterParams params;
  params.scoring = static_cast<int32_t>(weights.scoring);
  params.experts = experts;
  params.top_k = top_k;
  params.gate_temperature = weights.gate_temperature;
  params.routed_scaling = weights.routed_scaling;
  params.renormalize = weights.renormalize;
  params.renormalize_eps = weights.renormalize_eps;
  params.tid2eid_rows = top_k > 0 ? static_cast<int64_t>(weights.tid2eid.size()) / top_k : 0;
  int32_t* chosen = arena.get<int32_t>(kExperts, static_cast<std::size_t>(pairs));
  float* route_weights = arena.get<float>(kRouteWeights, static_cast<std::size_t>(pairs));
  k::route(router, rows_, params, store.floats(weights.bias), store.ints(weights.tid2eid), ids, chosen, route_weights,
           stream);

  // Pairs p = (token p / k, slot p % k), ordered by expert so that each expert's weights stream
  // once per run of its pairs: w1 / w3 read the pair's token row, w2 the pair's own hidden row,
  // and the outputs go back to pair order for the combine (same numbers in any order).
  const std::size_t scratch_bytes = k::moe_sort_scratch_bytes(pairs);
  void* scratch = arena.get<std::byte>(kSortScratch, scratch_bytes);
  int32_t* sorted_expert = arena.get<int32_t>(kSortedExpert, static_cast<std::size_t>(pairs));
  int32_t* sorted_token = arena.get<int32_t>(kPairToken, static_cast<std::size_t>(pairs));
  int64_t* sorted_pair = arena.get<int64_t>(kSortedPair, static_cast<std::size_t>(pairs));
  int64_t* position_of = arena.get<int64_t>(kPositionOf, static_cast<std::size_t>(pairs));
  // On the tensor cores: tiles of an expert's sorted pairs, 16 or 32 on wgmma for prefill-sized
  // calls, else expert_mma's 4 or 8; the sort and the tiles in one launch for decode-sized calls.
  const bool tensor_core_experts = backend_.experts_on_tensor_cores(weights);
  const int wgmma_tile_pairs = tensor_core_experts ? k::expert_wgmma_tile_pairs(pairs, experts) : 0;
  const int tile_pairs = wgmma_tile_pairs > 0 ? wgmma_tile_pairs : k::expert_tile_pairs(pairs, experts);
  const int64_t bound = tensor_core_experts ? k::expert_tile_bound(pairs, experts, tile_pairs) : 0;
  int32_t* tiles = tensor_core_experts ? arena.get<int32_t>(kExpertTiles, static_cast<std::size_t>(4 * bound)) : nullptr;
  int32_t* tile_count = tensor_core_experts ? arena.get<int32_t>(kExpertTileCount, 1) : nullptr;
  // V4.1 weighs a pair before w2: its weight in sorted order, from the sort's launch where it can.
  float* sorted_scale =
      weights.weight_before_down ? arena.get<float>(kSortedScale, static_cast<std::size_t>(pairs)) : nullptr;
  if (!tensor_core_experts ||
      !k::moe_sort_tiles(chosen, pairs, top_k, sorted_expert, sorted_token, sorted_pair, position_of, tiles, tile_count,
                         stream, tile_pairs, sorted_scale ? route_weights : nullptr, sorted_scale)) {
    k::moe_sort(chosen, pairs, top_k, scratch, scratch_bytes, sorted_expert, sorted_token, sorted_pair, position_of,
                stream);
    if (tensor_core_experts) k::expert_tiles(sorted_expert, pairs, tiles, tile_count, stream, tile_pairs);
    if (sorted_scale) k::gather_rows(route_weights, sorted_pair, pairs, 1, sorted_scale, stream);
  }
  const int32_t* identity_device = backend_.identity(pairs);

  // The experts' descriptor arrays were uploaded at attach (for_each_device_tensor); they are
  // built here only for a model part that walk did not cover.
  const auto experts_array = [&](const void* key, kernels::WeightMatrix model::ExpertWeights::* which) {
    if (const kernels::WeightMatrix* found = store.find_descriptor_array(key)) return found;
    std::vector<kernels::WeightMatrix> host;
    for (const model::ExpertWeights& expert : weights.experts) host.push_back(expert.*which);
    return store.descriptor_array(key, host);
  };
  const kernels::WeightMatrix* w1_device = experts_array(&weights.experts, &model::ExpertWeights::w1);
  const kernels::WeightMatrix* w2_device = experts_array(&weights.experts.front().w2, &model::ExpertWeights::w2);
  const kernels::WeightMatrix* w3_device = experts_array(&weights.experts.front().w3, &model::ExpertWeights::w3);
  const int64_t inner = weights.experts.front().w1.rows;
  float* gate = arena.get<float>(kGate, static_cast<std::size_t>(pairs * inner));
  float* sorted_out = arena.get<float>(kSortedOut, static_cast<std::size_t>(pairs * d));
  if (tensor_core_experts) {
    // wgmma: gate and up in f32 between the two launches, the SwiGLU taken as the second stages
    // them; expert_mma: h split, in gate's buffer, between its two kernels.
    const int gate_up_scales = std::max(store.descriptor_array_max_e8m0(&weights.experts),
                                        store.descriptor_array_max_e8m0(&weights.experts.front().w3));
    const int down_scales = store.descriptor_array_max_e8m0(&weights.experts.front().w2);
    if (wgmma_tile_pairs > 0) {
      auto* staged = arena.get<uint32_t>(kExpertStaged, static_cast<std::size_t>(k::expert_wgmma_staged_words(
                                                            bound, std::max(d, inner), tile_pairs)));
      float* up = arena.get<float>(kUp, static_cast<std::size_t>(pairs * inner));
      k::expert_gate_up_wgmma(sublayer_in_, sorted_token, tiles, tile_count, bound, w1_device, w3_device, inner, d,
                              staged, gate, up, stream, gate_up_scales, tile_pairs);
      k::expert_down_wgmma(gate, up, weights.swiglu_limit, sorted_scale, tiles, tile_count, bound, w2_device, d,
                           inner, staged, sorted_out, stream, down_scales, tile_pairs);
    } else {
      auto* x_split = arena.get<uint32_t>(kSplitInput, static_cast<std::size_t>(k::split_words(rows_, d)));
      auto* h_split = arena.get<uint32_t>(kGate, static_cast<std::size_t>(k::split_words(pairs, inner)));
      k::split_rows(sublayer_in_, rows_, d, d, x_split, stream);
      k::expert_gate_up(x_split, sorted_token, pairs, tiles, tile_count, bound, w1_device, w3_device, inner, d,
                        weights.swiglu_limit, sorted_scale, h_split, stream, gate_up_scales, tile_pairs);
      k::expert_down(h_split, pairs, tiles, tile_count, bound, w2_device, d, inner, sorted_out, stream, down_scales,
                     tile_pairs);
    }
  } else {
    float* up = arena.get<float>(kUp, static_cast<std::size_t>(pairs * inner));
    k::linear_gathered(sublayer_in_, sorted_token, pairs, w1_device, sorted_expert, inner, d, gate, stream);
    k::linear_gathered(sublayer_in_, sorted_token, pairs, w3_device, sorted_expert, inner, d, up, stream);
    k::swiglu(gate, up, pairs, inner, weights.swiglu_limit, sorted_scale, stream);
    k::linear_gathered(gate, identity_device, pairs, w2_device, sorted_expert, d, inner, sorted_out, stream);
  }
  if (side) side->join();
  k::moe_combine(sorted_out, position_of, weights.weight_before_down ? nullptr : route_weights, rows_, top_k, d,
                 shared, sublayer_out_, stream);
  if (routing) {
    std::vector<int32_t> host_experts(static_cast<std::size_t>(pairs));
    std::vector<float> host_weights(static_cast<std::size_t>(pairs));
    check(cudaMemcpyAsync(host_experts.data(), chosen, host_experts.size() * 4, cudaMemcpyDeviceToHost, stream),
          "download");
    check(cudaMemcpyAsync(host_weights.data(), route_weights, host_weights.size() * 4, cudaMemcpyDeviceToHost, stream),
          "download");
    sync();
    routing->assign(r, {});
    for (int64_t t = 0; t < rows_; ++t) {
      model::Routing& decision = (*routing)[static_cast<std::size_t>(t)];
      decision.experts.assign(host_experts.begin() + t * top_k, host_experts.begin() + (t + 1) * top_k);
      decision.weights.assign(host_weights.begin() + t * top_k, host_weights.begin() + (t + 1) * top_k);
    }
  }
}

void CudaForwardPass::drop_front_rows(int64_t rows) {
  settle();
  flat_ready_ = false;  // its rows no longer line up with streams()
  first_ += rows;
  rows_ -= rows;
  live_rows_ -= rows;  // (eager: no padding rows)
}

void CudaForwardPass::read_streams(std::span<float> out) {
  settle();
  // A graph would replay the copy into whatever `out` was at capture (model.cpp keeps tapped
  // calls off decode graphs).
  if (mode_ != PassMode::Eager) fail("cuda: a decode-graph pass cannot read its streams back (taps, traces)");
  const auto count = static_cast<std::size_t>(rows_ * shape_.hc.streams * shape_.hc.hidden);
  check(cudaMemcpyAsync(out.data(), streams(), count * 4, cudaMemcpyDeviceToHost, backend_.stream()), "download");
  sync();
}

void CudaForwardPass::tap_streams(int64_t tap, int64_t taps, std::span<float> out) {
  settle();
  if (mode_ != PassMode::Eager) fail("cuda: a decode-graph pass cannot take taps");
  const int64_t d = shape_.hc.hidden;
  if (std::cmp_not_equal(out.size(), rows_ * taps * d) || (device_taps_ && out.data() != host_taps_.data()))
    fail("cuda: taps into ", out.size(), " floats for ", rows_, " rows of ", taps, " x ", d);
  if (!device_taps_) {
    device_taps_ = backend_.arena().get<float>(kTaps, out.size());
    host_taps_ = out;
  }
  k::stream_means(streams(), rows_, shape_.hc.streams, d, tap, taps, device_taps_, backend_.stream());
}

void CudaForwardPass::finish_taps() {
  if (!device_taps_) return;
  check(cudaMemcpyAsync(host_taps_.data(), device_taps_, host_taps_.size() * 4, cudaMemcpyDeviceToHost,
                        backend_.stream()),
        "download");
  sync();
  device_taps_ = nullptr;
  host_taps_ = {};
}

float* CudaForwardPass::collapsed_rows(const model::HeadWeights& weights, std::span<const int64_t> rows,
                                      int64_t* count_out) {
  settle();
  WeightStore& store = backend_.weights();
  Arena& arena = backend_.arena();
  cudaStream_t stream = backend_.stream();
  const int64_t n = shape_.hc.streams;
  const int64_t d = shape_.hc.hidden;
  // A bucket's padding rows go through the head too (the graph's sizes are the bucket's); the
  // sampler reads only the call's.
  const std::vector<int64_t> head_rows = padded(rows, int64_t{0});
  const auto count = static_cast<int64_t>(head_rows.size());
  const auto c = static_cast<std::size_t>(count);
  const int64_t* row_ids = put(head_rows);
  float* head_streams = arena.get<float>(kHeadStreams, c * static_cast<std::size_t>(n * d));
  float* pre = arena.get<float>(kHeadPre, c * static_cast<std::size_t>(n));
  float* hidden = arena.get<float>(kHeadHidden, c * static_cast<std::size_t>(d));
  k::gather_rows(streams(), row_ids, count, n * d, head_streams, stream);
  if (shape_.single_pass) {
    k::gather_rows(carried_pre(), row_ids, count, n, pre, stream);
  } else {
    float* flat = arena.get<float>(kHeadFlat, c * static_cast<std::size_t>(n * d));
    float* mix_logits = arena.get<float>(kHeadMix, c * static_cast<std::size_t>(n));
    mix(*weights.hc_head, head_streams, count, flat, mix_logits);
    k::hc_head_pre(mix_logits, count, n, store.floats(weights.hc_head->base), store.floats(weights.hc_head->scale),
                   shape_.hc.hc_eps, pre, stream);
  }
  k::hc_collapse(pre, head_streams, count, n, d, hidden, stream);
  *count_out = count;
  return hidden;
}

void CudaForwardPass::collapse_head(const model::HeadWeights& weights, std::span<const int64_t> rows,
                                    float* collapsed) {
  int64_t count = 0;
  const float* device_rows = collapsed_rows(weights, rows, &count);
  const auto bytes = rows.size() * static_cast<std::size_t>(shape_.hc.hidden) * 4;
  check(cudaMemcpyAsync(collapsed, device_rows, bytes, cudaMemcpyDeviceToHost, backend_.stream()), "download");
  sync();
}

// The DSpark draft block's attention: projections and output on the device (at V4.1-Flash's widths
// they are most of the work: on the host they made a drafter call 121 ms at one sequence), the
// core on the host (model::draft_block_core), where the drafter's context rows live: a block is
// gamma rows a request against at most `window` context rows, and only the block's queries and
// K = V rows go down and its attended rows come back. A device core over a device context is the
// work still to do.
void CudaForwardPass::draft_attention(const model::AttentionWeights& weights,
                                      std::span<const model::AttentionSegment> segments) {
  cudaStream_t stream = backend_.stream();
  const int64_t heads = weights.heads;
  const int64_t d = weights.head_dim;
  std::optional<OpProfile::Section> timed;
  timed.emplace(backend_.profile(), "draft attention.project", stream);
  const std::vector<int64_t> positions =
      padded(std::span<const int64_t>(model::attention_positions(segments, live_rows_)), int64_t{0});
  const Projections projected =
      project_attention(weights, put(std::vector<int32_t>(positions.begin(), positions.end())));
  timed.reset();
  timed.emplace(backend_.profile(), "draft attention.core (host)", stream);
  const auto live = static_cast<std::size_t>(live_rows_);
  const auto width = static_cast<std::size_t>(heads * d);
  std::vector<float> q(live * width), kv(live * static_cast<std::size_t>(d)), attended(live * width);
  check(cudaMemcpyAsync(q.data(), projected.q, q.size() * 4, cudaMemcpyDeviceToHost, stream), "download");
  check(cudaMemcpyAsync(kv.data(), projected.kv, kv.size() * 4, cudaMemcpyDeviceToHost, stream), "download");
  sync();
  model::draft_block_core(weights, segments, q.data(), kv.data(), live_rows_, attended.data());
  float* device_attended = backend_.arena().get<float>(kAttended, static_cast<std::size_t>(rows_) * width);
  if (rows_ > live_rows_)
    check(cudaMemsetAsync(device_attended + live * width, 0, (static_cast<std::size_t>(rows_) - live) * width * 4, stream),
          "memset");
  check(cudaMemcpyAsync(device_attended, attended.data(), attended.size() * 4, cudaMemcpyHostToDevice, stream), "upload");
  timed.reset();
  timed.emplace(backend_.profile(), "draft attention.output", stream);
  output_attention(weights, device_attended);
  // The upload reads `attended`, a host vector about to go: wait for it.
  sync();
}

// The Markov loop on the device (draft_head.cu): gamma sequential positions of a few short
// launches each, where the host loop read gamma rows of logits back and ran the rank-r product
// over the whole vocabulary per position on one core (2.3 ms of a 4 ms draft at batch 1 on the
// embedded model).
void CudaForwardPass::greedy_draft_head(const model::DraftHeadWeights& weights, std::span<const int32_t> anchors,
                                        int64_t gamma, std::span<int32_t> tokens, std::span<float> confidence_raw) {
  WeightStore& store = backend_.weights();
  const kernels::WeightMatrix& w1 = store.matrix(*weights.markov_w1);
  const kernels::WeightMatrix& w2 = store.matrix(*weights.markov_w2);
  const int64_t hidden = shape_.hc.hidden;
  if (!k::draft_head_supports(w1, w2) || w2.rows != weights.head.head->rows ||
      std::cmp_not_equal(weights.confidence.size(), hidden + w1.cols)) {
    model::ForwardPass::greedy_draft_head(weights, anchors, gamma, tokens, confidence_raw);
    return;
  }
  const auto blocks = static_cast<int64_t>(anchors.size());
  const int64_t rows = blocks * gamma;
  if (std::cmp_not_equal(tokens.size(), rows) || std::cmp_not_equal(confidence_raw.size(), rows) || rows != rows_)
    fail("cuda: a draft head of ", blocks, " blocks of ", gamma, " rows in a pass of ", rows_, " rows, with room for ",
         tokens.size(), " tokens");
  const OpProfile::Section timed(backend_.profile(), "draft head", backend_.stream());
  Arena& arena = backend_.arena();
  cudaStream_t stream = backend_.stream();
  std::vector<int64_t> all_rows(static_cast<std::size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) all_rows[static_cast<std::size_t>(t)] = t;
  const float* confidence = store.floats(weights.confidence);
  int64_t count = 0;
  const float* collapsed = collapsed_rows(weights.head, all_rows, &count);
  float* hidden_confidence = arena.get<float>(kDraftHiddenConfidence, static_cast<std::size_t>(rows));
  k::row_dots(collapsed, rows, hidden, confidence, hidden_confidence, stream);
  const float* logits = head_logits(weights.head, all_rows, nullptr);  // collapses the rows again, after the dots
  const auto chunks = static_cast<std::size_t>(blocks * k::draft_head_chunks(w2.rows));
  const k::DraftHeadScratch scratch{arena.get<float>(kDraftEmbeddings, static_cast<std::size_t>(blocks * w1.cols)),
                                    arena.get<float>(kDraftPartialValues, chunks),
                                    arena.get<int32_t>(kDraftPartialIds, chunks)};
  int32_t* device_tokens = arena.get<int32_t>(kDraftTokens, static_cast<std::size_t>(rows));
  float* device_raw = arena.get<float>(kDraftConfidence, static_cast<std::size_t>(rows));
  k::greedy_draft_head(logits, hidden_confidence, w1, w2, confidence + hidden,
                       put(std::vector<int32_t>(anchors.begin(), anchors.end())), blocks, gamma, scratch, device_tokens,
                       device_raw, stream);
  check(cudaMemcpyAsync(tokens.data(), device_tokens, tokens.size() * 4, cudaMemcpyDeviceToHost, stream), "download");
  check(cudaMemcpyAsync(confidence_raw.data(), device_raw, confidence_raw.size() * 4, cudaMemcpyDeviceToHost, stream),
        "download");
  sync();
}

float* CudaForwardPass::head_logits(const model::HeadWeights& weights, std::span<const int64_t> rows,
                                   std::vector<float>* hidden_out) {
  WeightStore& store = backend_.weights();
  Arena& arena = backend_.arena();
  cudaStream_t stream = backend_.stream();
  const int64_t d = shape_.hc.hidden;
  int64_t count = 0;
  float* hidden = collapsed_rows(weights, rows, &count);
  const auto c = static_cast<std::size_t>(count);
  k::rms_norm(hidden, count, d, store.floats(weights.norm), shape_.norm_eps, hidden, stream);
  const kernels::WeightMatrix& head = store.matrix(*weights.head);
  float* device_logits = arena.get<float>(kLogits, c * static_cast<std::size_t>(head.rows));
  linear_(hidden, count, head, device_logits);
  if (hidden_out) {
    hidden_out->resize(c * static_cast<std::size_t>(d));
    check(cudaMemcpyAsync(hidden_out->data(), hidden, hidden_out->size() * 4, cudaMemcpyDeviceToHost, stream),
          "download");
  }
  return device_logits;
}

void CudaForwardPass::head(const model::HeadWeights& weights, std::span<const int64_t> rows, float* logits,
                           std::vector<float>* hidden_out) {
  const OpProfile::Section timed(backend_.profile(), "head", backend_.stream());
  const float* device_logits = head_logits(weights, rows, hidden_out);
  const auto bytes = rows.size() * static_cast<std::size_t>(weights.head->rows) * 4;
  check(cudaMemcpyAsync(logits, device_logits, bytes, cudaMemcpyDeviceToHost, backend_.stream()), "download");
  sync();
}

void CudaForwardPass::head_draw(const model::HeadWeights& weights, std::span<const int64_t> rows,
                                std::span<const model::TokenDraw> draws, std::span<model::DrawnToken> drawn,
                                const std::function<void()>* before_read,
                                std::unique_ptr<model::PendingDraws>* pending) {
  const OpProfile::Section timed(backend_.profile(), "head + sampler", backend_.stream());
  Arena& arena = backend_.sampler_arena();
  cudaStream_t stream = backend_.stream();
  const int64_t vocab = weights.head->rows;
  const float* logits = head_logits(weights, rows, nullptr);
  finish_graph();  // a replayed step's graph starts here: before_read overlaps all of it
  if (before_read) (*before_read)();
  const auto count = static_cast<int64_t>(draws.size());
  if (count == 0) return;
  // One logits row per draw (the children of a fork draw from their parent's row).
  bool identity = count == static_cast<int64_t>(rows.size());
  std::vector<int64_t> draw_rows;
  for (int64_t i = 0; i < count; ++i) {
    draw_rows.push_back(draws[i].row);
    identity = identity && draws[i].row == i;
  }
  if (!identity) {
    const int64_t* device_rows = put(draw_rows);
    float* gathered = arena.get<float>(kDrawLogits, static_cast<std::size_t>(count * vocab));
    k::gather_rows(logits, device_rows, count, vocab, gathered, stream);
    logits = gathered;
  }
  std::vector<k::SampleRowParams> params(static_cast<std::size_t>(count));
  std::vector<int32_t> prompt;
  std::vector<k::GeneratedCount> generated;
  std::vector<k::LogitBias> bias;
  // Each masked draw's mask, widened (or cut) to the logits' vocabulary.
  const auto mask_words = static_cast<std::size_t>((vocab + 63) / 64);
  std::vector<uint64_t> masks;
  for (int64_t i = 0; i < count; ++i) {
    const model::TokenDraw& draw = draws[i];
    k::SampleRowParams& p = params[static_cast<std::size_t>(i)];
    p.temperature = draw.temperature;
    p.top_p = draw.top_p;
    p.min_p = draw.min_p;
    p.top_k = draw.top_k;
    p.presence_penalty = draw.presence_penalty;
    p.frequency_penalty = draw.frequency_penalty;
    p.repetition_penalty = draw.repetition_penalty;
    p.seed = draw.seed;
    p.request_id = draw.request_id;
    p.position = draw.position;
    p.logprobs = draw.logprobs;
    p.prompt_begin = static_cast<int32_t>(prompt.size());
    prompt.insert(prompt.end(), draw.prompt_tokens.begin(), draw.prompt_tokens.end());
    p.prompt_end = static_cast<int32_t>(prompt.size());
    p.generated_begin = static_cast<int32_t>(generated.size());
    for (const model::TokenDraw::Generated& seen : draw.generated)
      generated.push_back({seen.token, seen.count, seen.in_prompt ? 1 : 0});
    p.generated_end = static_cast<int32_t>(generated.size());
    p.bias_begin = static_cast<int32_t>(bias.size());
    for (const auto& [token, value] : draw.logit_bias) bias.push_back({token, value});
    p.bias_end = static_cast<int32_t>(bias.size());
    if (!draw.mask.empty()) {
      p.mask_row = static_cast<int32_t>(masks.size() / mask_words);
      p.mask_fallback_token = draw.mask_fallback_token;
      const std::size_t kept = std::min(mask_words, draw.mask.size());
      masks.insert(masks.end(), draw.mask.begin(), draw.mask.begin() + static_cast<std::ptrdiff_t>(kept));
      masks.resize(masks.size() + (mask_words - kept), 0);
      // Bits past the vocabulary in the last word are never read (the kernel stops at vocab).
    }
  }
  const std::size_t scratch_bytes = k::sample_scratch_bytes(count, vocab);
  void* scratch = arena.get<std::byte>(kSampleScratch, scratch_bytes);
  k::SampleRowResult* results = arena.get<k::SampleRowResult>(kSampleResults, static_cast<std::size_t>(count));
  k::sample_rows(logits, count, vocab, put(params), put(prompt), put(generated), put(bias),
                 masks.empty() ? nullptr : put(masks), scratch, scratch_bytes,
                 results, stream);
  std::unique_ptr<DrawSlot> slot = backend_.take_slot(count);
  k::store_drawn_tokens(results, std::min(count, kChainedDrawCapacity), static_cast<int32_t*>(slot->tokens.data()),
                        stream);
  check(cudaMemcpyAsync(slot->results, results, static_cast<std::size_t>(count) * sizeof(k::SampleRowResult),
                        cudaMemcpyDeviceToHost, stream),
        "download");
  check(cudaEventRecord(slot->done, stream), "cudaEventRecord");
  std::vector<int64_t> positions;
  positions.reserve(static_cast<std::size_t>(count));
  for (const model::TokenDraw& draw : draws) positions.push_back(draw.position);
  auto draws_back = std::make_unique<CudaPendingDraws>(backend_, std::move(slot), vocab, std::move(positions));
  if (pending) {
    *pending = std::move(draws_back);
    pending_ = true;  // the pass ends without waiting for its stream
    return;
  }
  draws_back->wait(drawn);
}

DrawSlot::DrawSlot() : tokens(static_cast<std::size_t>(kChainedDrawCapacity) * sizeof(int32_t)) {
  check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
}

DrawSlot::~DrawSlot() {
  if (done) cudaEventDestroy(done);
  if (results) cudaFreeHost(results);
}

void DrawSlot::reserve(int64_t draws) {
  if (capacity >= static_cast<std::size_t>(draws)) return;
  // Only a slot no pass uses grows (taken from the free list, its event fired and read).
  if (results) check(cudaFreeHost(results), "cudaFreeHost");
  results = nullptr;
  capacity = 0;
  const std::size_t grown = std::max<std::size_t>(static_cast<std::size_t>(draws), 256);
  check(cudaHostAlloc(reinterpret_cast<void**>(&results), grown * sizeof(k::SampleRowResult), cudaHostAllocDefault),
        "cudaHostAlloc");
  capacity = grown;
}

CudaPendingDraws::~CudaPendingDraws() {
  if (!slot_) return;
  // Unread: the device may still write the slot; it goes back once it has.
  (void)cudaEventSynchronize(slot_->done);
  backend_.give_back(std::move(slot_));
}

void CudaPendingDraws::wait(std::span<model::DrawnToken> drawn) {
  if (!slot_) fail("CUDA backend: draws read twice");
  check(cudaEventSynchronize(slot_->done), "cudaEventSynchronize");
  if (drawn.size() != positions_.size()) fail("CUDA backend: ", positions_.size(), " draws read into ", drawn.size());
  read_drawn(slot_->results, positions_, vocab_, drawn);
}

void CudaBackend::reserve(const model::Model& model, int64_t rows) {
  const ModelConfig& c = model.config();
  const auto r = static_cast<std::size_t>(rows);
  const auto n = static_cast<std::size_t>(c.hc_mult);
  const auto d = static_cast<std::size_t>(c.hidden_size);
  std::size_t experts = 1, pairs = r, inner = 1, shared_inner = 1, rank = 1, query = 1, head_dim = 1, low_rank = 1;
  bool wgmma_experts = false;
  for (const model::LayerWeights& layer : model.layers()) {
    const model::MoeWeights& moe = layer.moe;
    wgmma_experts = wgmma_experts || (!simt_ && !moe.experts.empty() && k::expert_tiles_fit(moe.experts.front().w1));
    experts = std::max(experts, static_cast<std::size_t>(moe.gate.rows));
    if (!moe.experts.empty()) inner = std::max(inner, static_cast<std::size_t>(moe.experts.front().w1.rows));
    if (!moe.shared.empty()) shared_inner = std::max(shared_inner, static_cast<std::size_t>(moe.shared.front().w1.rows));
    pairs = std::max(pairs, r * static_cast<std::size_t>(moe.top_k));
    const model::AttentionWeights& a = layer.attention;
    rank = std::max(rank, static_cast<std::size_t>(a.wq_a.rows));
    query = std::max(query, static_cast<std::size_t>(a.heads * a.head_dim));
    head_dim = std::max(head_dim, static_cast<std::size_t>(a.head_dim));
    const std::size_t groups = a.wo_a_groups.size();
    pairs = std::max(pairs, r * groups);
    if (groups > 0) low_rank = std::max(low_rank, groups * static_cast<std::size_t>(a.wo_a_groups.front().rows));
  }
  if (!simt_) {
    // Calls of a few rows split their keys; the most splits' floats of any row count up to `rows`.
    const int32_t range_keys = options_.batch_invariant ? k::kInvariantRangeKeys : 0;
    int64_t split_floats = 0;
    for (const model::LayerWeights& layer : model.layers())
      for (int64_t call_rows = 1; call_rows <= rows; ++call_rows) {
        const int64_t floats = k::sink_attention_split_floats(call_rows, static_cast<int32_t>(layer.attention.heads),
                                                              static_cast<int32_t>(layer.attention.head_dim),
                                                              /*max_row_keys=*/0, range_keys);
        if (floats == 0) break;  // and none for larger calls
        split_floats = std::max(split_floats, floats);
      }
    if (split_floats > 0) arena_.get<float>(kSinkSplits, static_cast<std::size_t>(split_floats));
  }
  const std::size_t route_pairs = pairs;
  const std::size_t expert_pairs = r * static_cast<std::size_t>(c.num_experts_per_tok);
  const auto vocab = static_cast<std::size_t>(model.vocab_size());
  const std::pair<int, std::size_t> float_slots[] = {
      {kStreams, r * n * d},        {kSublayerIn, r * d},          {kSublayerOut, r * d},
      {kFlat, r * n * d},           {kMixLogits, r * (2 + n) * n}, {kPre, r * n},
      {kPost, r * n},               {kComb, r * n * n},            {kCarriedPre, r * n},
      {kRouterLogits, r * experts}, {kRouteWeights, route_pairs},  {kGate, expert_pairs * inner},
      {kUp, expert_pairs * inner},  {kSharedGate, r * shared_inner},
      {kSharedUp, r * shared_inner}, {kSharedOut, r * d},          {kHeadStreams, r * n * d},
      {kHeadPre, r * n},            {kHeadHidden, r * d},          {kHeadFlat, r * n * d},
      {kHeadMix, r * n},            {kLogits, r * vocab},          {kQResidual, r * rank},
      {kQuery, r * query},          {kKv, r * head_dim},           {kAttended, r * query},
      {kLowRank, r * low_rank},     {kSortedOut, expert_pairs * d}, {kSortedScale, expert_pairs},
      {kLowRankByGroup, r * low_rank}};
  for (const auto& [slot, count] : float_slots) arena_.get<float>(slot, count);
  for (const auto& [slot, count] :
       {std::pair<int, std::size_t>{kExperts, route_pairs}, {kPairToken, pairs}, {kPairIdentity, pairs}, {kTokenIds, r}})
    arena_.get<int32_t>(slot, count);
  arena_.get<int32_t>(kSortedExpert, expert_pairs);
  arena_.get<int64_t>(kSortedPair, expert_pairs);
  arena_.get<int64_t>(kPositionOf, expert_pairs);
  arena_.get<std::byte>(kSortScratch, k::moe_sort_scratch_bytes(static_cast<int64_t>(expert_pairs)));
  arena_.get<int32_t>(kExpertTiles, 4 * static_cast<std::size_t>(k::expert_tile_bound(
                                            static_cast<int64_t>(expert_pairs), static_cast<int64_t>(experts))));
  arena_.get<int32_t>(kExpertTileCount, 1);
  const auto wgmma_tile_pairs = wgmma_experts ? k::expert_wgmma_tile_pairs(static_cast<int64_t>(expert_pairs),
                                                                           static_cast<int64_t>(experts))
                                              : 0;
  if (wgmma_tile_pairs > 0)  // a smaller call takes the same tile or a narrower one, in fewer words
    arena_.get<uint32_t>(kExpertStaged,
                         static_cast<std::size_t>(k::expert_wgmma_staged_words(
                             k::expert_tile_bound(static_cast<int64_t>(expert_pairs), static_cast<int64_t>(experts),
                                                  wgmma_tile_pairs),
                             static_cast<int64_t>(std::max(d, inner)), wgmma_tile_pairs)));
  widest_matrix_ = std::max(static_cast<int64_t>(d), widest_matrix(model));
  // h between the experts' two kernels is split (three BF16 planes) in gate's buffer.
  arena_.get<uint32_t>(kGate, static_cast<std::size_t>(k::split_words(static_cast<int64_t>(expert_pairs),
                                                                      static_cast<int64_t>(inner))));
  reserve_linear_buffers(rows);
}

// Every tensor the GPU part of the forward pass reads, in one walk over the model, so that what is
// planned (counted before anything is allocated) and what is uploaded cannot drift apart.
// visit.matrix(w), visit.expert(w, tiles) (routed experts; tiles: all of the layer's fit expert tiles),
// visit.floats(values), visit.ints(values), visit.descriptors(key, matrices).
template <typename Visit>
void for_each_device_tensor(const model::Model& model, Visit& visit) {
  const model::HeadWeights head = model.head_weights();
  const auto hyper_connection = [&](const model::HyperConnectionWeights& hc) {
    visit.matrix(hc.fn);
    visit.floats(hc.base);
    visit.floats(hc.scale);
  };
  visit.matrix(model.embedding());
  visit.matrix(*head.head);
  visit.floats(head.norm);
  if (head.hc_head) hyper_connection(*head.hc_head);
  if (const model::Engram* engram = model.engram())
    for (int i = 0; i < engram->layers(); ++i) {
      visit.matrix(engram->layer(i).wkv);
      visit.floats(engram->gate_weight(i));
    }
  for (const model::LayerWeights& layer : model.layers()) {
    hyper_connection(layer.attn_hc);
    hyper_connection(layer.ffn_hc);
    visit.floats(layer.attn_norm);
    visit.floats(layer.ffn_norm);
    const model::AttentionWeights& a = layer.attention;
    for (const kernels::WeightMatrix* w : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b}) visit.matrix(*w);
    for (const kernels::WeightMatrix& g : a.wo_a_groups) visit.matrix(g);
    visit.descriptors(&a.wo_a_groups, a.wo_a_groups);
    visit.floats(a.q_norm);
    visit.floats(a.kv_norm);
    visit.floats(a.sink);
    visit.floats(a.rope.inv_freq());
    const auto compressor = [&](const model::CompressorWeights& c) {
      visit.matrix(c.wkv);
      visit.matrix(c.wgate);
      visit.floats(c.ape);
      visit.floats(c.norm);
    };
    if (a.compressor) compressor(*a.compressor);
    if (a.indexer) {
      visit.matrix(a.indexer->wq_b);
      visit.matrix(a.indexer->weights_proj);
      compressor(a.indexer->compressor);
    }
    if (a.latent_compressor) {
      visit.matrix(a.latent_compressor->wkv);
      if (a.latent_compressor->wgate) visit.matrix(*a.latent_compressor->wgate);
      visit.floats(a.latent_compressor->norm);
    }
    if (a.index_keys) {
      visit.matrix(a.index_keys->wk);
      visit.floats(a.index_keys->k_norm);
    }
    if (a.index_queries) {
      visit.matrix(a.index_queries->wq_b);
      visit.matrix(a.index_queries->weights_proj);
    }
    const model::MoeWeights& moe = layer.moe;
    visit.matrix(moe.gate);
    visit.floats(moe.bias);
    visit.ints(moe.tid2eid);
    std::vector<kernels::WeightMatrix> w1, w2, w3;
    for (const model::ExpertWeights& expert : moe.experts) {
      w1.push_back(expert.w1);
      w2.push_back(expert.w2);
      w3.push_back(expert.w3);
    }
    // In expert tiles when every routed expert of the layer fits them (the expert kernels' faster
    // layout; the SIMT fallback reads row-major).
    bool tiles = true;
    for (const std::vector<kernels::WeightMatrix>* kind : {&w1, &w2, &w3})
      for (const kernels::WeightMatrix& w : *kind) tiles = tiles && kernels::cuda::expert_tiles_fit(w);
    for (const std::vector<kernels::WeightMatrix>* kind : {&w1, &w2, &w3})
      for (const kernels::WeightMatrix& w : *kind) visit.expert(w, tiles);
    if (!moe.experts.empty()) {
      // The keys moe() looks the arrays up by.
      visit.descriptors(&moe.experts, w1);
      visit.descriptors(&moe.experts.front().w2, w2);
      visit.descriptors(&moe.experts.front().w3, w3);
    }
    for (const model::ExpertWeights& expert : moe.shared) {
      visit.matrix(expert.w1);
      visit.matrix(expert.w2);
      visit.matrix(expert.w3);
    }
  }
}

struct PlanWeights {
  WeightStore& store;
  void matrix(const kernels::WeightMatrix& w) { store.plan_matrix(w); }
  void expert(const kernels::WeightMatrix& w, bool) { store.plan_matrix(w); }
  void floats(std::span<const float> values) { store.plan_floats(values); }
  void ints(std::span<const int32_t> values) { store.plan_ints(values); }
  void descriptors(const void*, const std::vector<kernels::WeightMatrix>&) {}  // bytes, not megabytes
};

struct UploadWeights {
  WeightStore& store;
  bool tensor_cores;  // false under DEEPINFER_CUDA_SIMT=1: the SIMT kernels read row-major experts
  void matrix(const kernels::WeightMatrix& w) { store.matrix(w); }
  void expert(const kernels::WeightMatrix& w, bool tiles) { store.expert_matrix(w, tiles && tensor_cores); }
  void floats(std::span<const float> values) { store.floats(values); }
  void ints(std::span<const int32_t> values) { store.ints(values); }
  void descriptors(const void* key, const std::vector<kernels::WeightMatrix>& matrices) {
    store.descriptor_array(key, matrices);
  }
};

struct WidestMatrix {
  int64_t cols = 0;
  void matrix(const kernels::WeightMatrix& w) { cols = std::max(cols, w.cols); }
  void expert(const kernels::WeightMatrix& w, bool) { matrix(w); }
  void floats(std::span<const float>) {}
  void ints(std::span<const int32_t>) {}
  void descriptors(const void*, const std::vector<kernels::WeightMatrix>& matrices) {
    for (const kernels::WeightMatrix& w : matrices) matrix(w);
  }
};

// The widest row a linear splits: any weight's columns, and a grouped projection's groups taken
// together (linear_mma_grouped splits the whole attended row once).
int64_t widest_matrix(const model::Model& model) {
  WidestMatrix widest;
  for_each_device_tensor(model, widest);
  for (const model::LayerWeights& layer : model.layers()) {
    int64_t grouped = 0;
    for (const kernels::WeightMatrix& group : layer.attention.wo_a_groups) grouped += group.cols;
    widest.cols = std::max(widest.cols, grouped);
  }
  return widest.cols;
}

std::string gib(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

}  // namespace

GraphCounts graph_counts(const model::Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  return cuda ? cuda->graph_counts() : GraphCounts{};
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

DeviceInfo device_info(int index) {
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, index), "cudaGetDeviceProperties");
  check(cudaSetDevice(index), "cudaSetDevice");
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return {properties.name, static_cast<int64_t>(total_bytes), static_cast<int64_t>(free_bytes)};
}

Attached make_backend(const model::Model& model, int index, int64_t max_rows, const Options& options) {
  const DeviceInfo info = device_info(index);
  auto backend = std::make_shared<CudaBackend>(
      index, "cuda:" + std::to_string(index) + " (" + info.name + ", " + gib(static_cast<std::size_t>(info.total_bytes)) + ")",
      options);
  WeightStore& store = backend->weights();
  PlanWeights plan{store};
  for_each_device_tensor(model, plan);
  // Room for the activation arena and the CUDA context's own needs beside the weights.
  constexpr std::size_t kReserve = std::size_t{1} << 30;
  if (store.planned_bytes() + kReserve > static_cast<std::size_t>(info.free_bytes))
    fail("the model does not fit on cuda:", index, " (", info.name, "): its weights need ", gib(store.planned_bytes()),
         " plus ", gib(kReserve), " of working memory, and the device has ", gib(static_cast<std::size_t>(info.free_bytes)),
         " free of ", gib(static_cast<std::size_t>(info.total_bytes)));
  UploadWeights upload{store, backend->tensor_cores()};
  for_each_device_tensor(model, upload);
  try {
    backend->reserve(model, max_rows);
  } catch (const Error& error) {
    fail("cuda:", index, ": the weights fit, but the activations of a ", max_rows,
         "-row step do not (serve's --max-batch-tokens sets the rows: fewer need less): ", error.what());
  }
  return {backend, static_cast<int64_t>(store.uploaded_bytes()), static_cast<int64_t>(backend->arena().bytes())};
}

}  // namespace deepinfer::backend::cuda

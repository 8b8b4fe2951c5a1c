// Decode-step throughput of Model::forward_batch against a memory-bandwidth bound, on the CPU or
// a CUDA device. A plain main(), not Google Benchmark: it takes a model path.
//
//   decode_step_bench --model DIR [--tokenizer FILE] [--device cpu|cuda[:N]] [--batch 1,16,64]
//                     [--context 512] [--steps 16] [--repeat 5] [--warmup 1] [--prefill-tokens 4096]
//                     [--threads N] [--seed S] [--no-trace] [--shared-prefill] [--copy-gb G] [--json]
//
// For each batch size B: B fresh sequences are prefilled to --context random tokens (chunks
// through forward_batch, LogitRows::None, at most --prefill-tokens rows per call), --warmup
// untimed decode steps run, then --repeat times --steps decode steps (one token per sequence,
// LogitRows::Last, random ids) are timed on the wall clock; the figure is the median ms/step
// over the repeats. The sequences keep growing: repeat r starts at context + warmup + r * steps.
// --shared-prefill prefills one sequence and copies it to the others (long contexts at batch 64).
//
// The bound: bytes one decode step reads (step_bytes(): weights, distinct routed experts, cache)
// divided by a copy bandwidth measured in the same run (cuda: device-to-device cudaMemcpy of
// --copy-gb, default 4; cpu: memcpy of 1 GB host buffers split over the thread pool), counting
// bytes read + written per second as docs/BENCHMARKS.md does. % of bound = bound ms / measured
// ms: 100% would be a step that moves only its unavoidable bytes at copy speed.
//
// The routed experts a step touches come from a ForwardTrace: the first warm-up step runs each
// sequence alone through Model::forward with a trace (batch invariance: the same routing as the
// batched step), and the union of the B tokens' experts per layer is what one batched step
// reads. --no-trace (or a backend that fails to trace) uses the uniform-routing estimate
// E (1 - (1 - k/E)^B) instead, and the output says which.
//
// --verify-rows 1,2,..: after the decode figures, the cost of a speculative verification step
// (what the engine's scheduled verification profiles): every sequence takes W rows at once, W per
// list entry, timed as above (median of the repeats), twice: with every row's logits brought to
// the host (LogitRows::All, the engine's verification path today) and with the last row's only
// (the pass itself). The table gives ms/step and the ratio to W = 1.
//
// --speculation-profile N: first, the table confidence-scheduled verification profiles at start
// (engine profile_step_rates with max_tokens N): the verification-shaped pass at 1, 2, 4 .. rows
// and the drafter's call for 1, 2, 4 .. sequences (a model with a DSpark drafter).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/device.h"
#include "copy_bandwidth.h"
#include "integer_options.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/speculation.h"
#include "model/drafter.h"
#include "model/model.h"

#ifndef DEEPINFER_BENCH_CUDA
// Without the CUDA backend, parse_device refuses --device cuda before this is reached.
deepinfer::bench::CopyBandwidth deepinfer::bench::cuda_copy_bandwidth(int, int64_t, int) {
  deepinfer::fail("decode_step_bench: built without the CUDA backend, no device copy bandwidth");
}
#endif

namespace {

using deepinfer::Error;
using deepinfer::fail;
using deepinfer::ModelConfig;
using deepinfer::kernels::ScaleEncoding;
using deepinfer::kernels::WeightEncoding;
using deepinfer::kernels::WeightMatrix;
using deepinfer::model::BatchItem;
using deepinfer::model::LogitRows;
using deepinfer::model::Model;
using deepinfer::model::SequenceState;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  std::string tokenizer;
  std::string device = "cpu";
  std::vector<int64_t> batches = {1, 16, 64};
  int64_t context = 512;
  int64_t steps = 16;
  int64_t repeat = 5;
  int64_t warmup = 1;
  int64_t prefill_tokens = 4096;
  int threads = 0;  // 0: the default pool (DEEPINFER_THREADS or every hardware thread)
  uint64_t seed = 1;
  bool trace = true;
  bool shared_prefill = false;
  bool enforce_eager = false;
  bool batch_invariant = false;
  double copy_gb = 4.0;
  bool json = false;
  std::vector<int64_t> verify_rows;  // --verify-rows: widths of the verification steps to time
  int64_t speculation_profile = 0;   // --speculation-profile: the engine's step-cost table up to N tokens
};

[[noreturn]] void usage(const std::string& message) {
  std::fprintf(stderr,
               "decode_step_bench: %s\n"
               "usage: decode_step_bench --model DIR [--tokenizer FILE] [--device cpu|cuda[:N]] [--batch 1,16,64]\n"
               "       [--context 512] [--steps 16] [--repeat 5] [--warmup 1] [--prefill-tokens 4096]\n"
               "       [--threads N] [--seed S] [--no-trace] [--shared-prefill] [--copy-gb 4] [--json]\n"
               "       [--enforce-eager] [--batch-invariant] [--verify-rows 1,2,3,4,5,6]\n"
               "       [--speculation-profile MAX_TOKENS]\n",
               message.c_str());
  std::exit(2);
}

int64_t parse_positive(const std::string& flag, const std::string& text, int64_t minimum = 1) {
  return deepinfer::bench::parse_integer(flag, text, minimum, usage);
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--model") o.model = value();
    else if (flag == "--tokenizer") o.tokenizer = value();
    else if (flag == "--device") o.device = value();
    else if (flag == "--batch") o.batches = deepinfer::bench::parse_integer_list(flag, value(), 1, usage);
    else if (flag == "--context") o.context = parse_positive(flag, value(), 0);
    else if (flag == "--steps") o.steps = parse_positive(flag, value());
    else if (flag == "--repeat") o.repeat = parse_positive(flag, value());
    else if (flag == "--warmup") o.warmup = parse_positive(flag, value(), 0);
    else if (flag == "--prefill-tokens") o.prefill_tokens = parse_positive(flag, value());
    else if (flag == "--threads") o.threads = static_cast<int>(parse_positive(flag, value()));
    else if (flag == "--seed") o.seed = static_cast<uint64_t>(parse_positive(flag, value(), 0));
    else if (flag == "--no-trace") o.trace = false;
    else if (flag == "--verify-rows") o.verify_rows = deepinfer::bench::parse_integer_list(flag, value(), 1, usage);
    else if (flag == "--shared-prefill") o.shared_prefill = true;
    else if (flag == "--speculation-profile") o.speculation_profile = parse_positive(flag, value());
    else if (flag == "--enforce-eager") o.enforce_eager = true;
    else if (flag == "--batch-invariant") o.batch_invariant = true;
    else if (flag == "--copy-gb") {
      o.copy_gb = std::atof(value().c_str());
      if (!(o.copy_gb > 0)) usage("--copy-gb: expected a positive number of GB");
    } else if (flag == "--json") o.json = true;
    else if (flag == "--help" || flag == "-h") usage("help");
    else usage("unknown option " + flag);
  }
  if (o.model.empty()) usage("--model is required");
  return o;
}

// ---------------------------------------------------------------------------------------------
// Bytes one decode step reads.

// A weight matrix as stored: its codes (4, 2, 1 or 1/2 byte per weight) plus its scale bytes,
// i.e. what a kernel that streams the whole matrix once reads. Row slices (wo_a groups) count
// their own rows and their own scale tiles.
double matrix_bytes(const WeightMatrix& m) {
  if (m.rows == 0 || m.cols == 0) return 0;
  const double weights = static_cast<double>(m.rows) * static_cast<double>(m.cols);
  double code_bytes = 0;
  switch (m.encoding) {
    case WeightEncoding::F32: code_bytes = 4 * weights; break;
    case WeightEncoding::BF16: code_bytes = 2 * weights; break;
    case WeightEncoding::FP8_E4M3: code_bytes = weights; break;
    case WeightEncoding::FP4_E2M1: code_bytes = weights / 2; break;
  }
  double scales = 0;
  if (m.encoding == WeightEncoding::FP8_E4M3)
    scales = static_cast<double>((m.rows + m.block_rows - 1) / m.block_rows) *
             static_cast<double>((m.cols + m.block_cols - 1) / m.block_cols);
  else if (m.encoding == WeightEncoding::FP4_E2M1)
    scales = static_cast<double>(m.rows) * static_cast<double>((m.cols + m.block_cols - 1) / m.block_cols);
  const double scale_size = m.scale_encoding == ScaleEncoding::F32 ? 4 : m.scale_encoding == ScaleEncoding::E8M0 ? 1 : 0;
  return code_bytes + scales * scale_size;
}

double floats_bytes(const std::vector<float>& v) { return 4.0 * static_cast<double>(v.size()); }

// The weight matrices a token of a layer multiplies, each with its part of the layer: the attention
// projections (low-rank q, K = V, the grouped output, V4's compressor and indexer, V4.1's kv-source
// compressor, index keys and index-source queries), both mHC sites' fn, the router, the shared
// expert(s), and one routed expert's w1, w2, w3 (every routed expert of a layer has its shapes).
enum class Part { Attention, Mhc, Router, SharedExperts, RoutedExpert };

template <typename Layer, typename Visit>
void for_each_token_matrix(const Layer& layer, Visit visit) {
  const auto& a = layer.attention;
  for (const WeightMatrix* m : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b}) visit(*m, Part::Attention);
  for (const WeightMatrix& group : a.wo_a_groups) visit(group, Part::Attention);
  if (a.compressor) {
    visit(a.compressor->wkv, Part::Attention);
    visit(a.compressor->wgate, Part::Attention);
  }
  if (a.indexer)
    for (const WeightMatrix* m : {&a.indexer->wq_b, &a.indexer->weights_proj, &a.indexer->compressor.wkv,
                                  &a.indexer->compressor.wgate})
      visit(*m, Part::Attention);
  if (a.latent_compressor) {
    visit(a.latent_compressor->wkv, Part::Attention);
    if (a.latent_compressor->wgate) visit(*a.latent_compressor->wgate, Part::Attention);
  }
  if (a.index_keys) visit(a.index_keys->wk, Part::Attention);
  if (a.index_queries) {
    visit(a.index_queries->wq_b, Part::Attention);
    visit(a.index_queries->weights_proj, Part::Attention);
  }
  for (const auto* hc : {&layer.attn_hc, &layer.ffn_hc}) visit(hc->fn, Part::Mhc);
  const auto& moe = layer.moe;
  visit(moe.gate, Part::Router);
  for (const auto& shared : moe.shared)
    for (const WeightMatrix* m : {&shared.w1, &shared.w2, &shared.w3}) visit(*m, Part::SharedExperts);
  if (!moe.experts.empty())
    for (const WeightMatrix* m : {&moe.experts.front().w1, &moe.experts.front().w2, &moe.experts.front().w3})
      visit(*m, Part::RoutedExpert);
}

struct StepBytes {
  // weights
  double attention = 0;       // attention projections and their norms / sinks, V4 compressors and indexers,
                              // V4.1 kv-source compressors + index-key projections and index-source queries
  double mhc = 0;             // mHC fn / base / scale of both sites of every layer
  double router = 0;          // gate.weight and bias (tid2eid rows of hash layers: B rows)
  double shared_experts = 0;  // w1, w2, w3 of the shared expert(s)
  double routed_experts = 0;  // distinct experts touched by the step x (w1 + w2 + w3) of one expert
  double head = 0;            // final norm + the whole LM head (every vocabulary row is read)
  double embedding = 0;       // B rows of the embedding
  double engram = 0;          // V4.1 Engram: wkv and gate weights + B x lookups table rows (estimate)
  // per-sequence state
  double cache = 0;           // estimate: window rows, attended compressed entries, scored index keys
  double weights() const {
    return attention + mhc + router + shared_experts + routed_experts + head + embedding + engram;
  }
  double total() const { return weights() + cache; }
};

// What one decode step of `batch` sequences (one token each, each holding `context` tokens
// before the step) reads, given how many distinct routed experts each layer's step touches
// (distinct_experts[layer]). Weights are counted once per step whatever the batch (a batched
// linear streams each matrix once for all rows), except the embedding and Engram rows (per token)
// and the routed experts (per distinct expert). Not counted: activations (a few MB), the sampler,
// MTP layers (the forward pass does not run them), tensors a step never reads (bias_vl).
StepBytes step_bytes(const Model& model, int64_t batch, int64_t context, const std::vector<double>& distinct_experts) {
  const ModelConfig& c = model.config();
  StepBytes out;
  const auto& layers = model.layers();
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto& layer = layers[l];
    const auto& a = layer.attention;
    for_each_token_matrix(layer, [&](const WeightMatrix& m, Part part) {
      switch (part) {
        case Part::Attention: out.attention += matrix_bytes(m); break;
        case Part::Mhc: out.mhc += matrix_bytes(m); break;
        case Part::Router: out.router += matrix_bytes(m); break;
        case Part::SharedExperts: out.shared_experts += matrix_bytes(m); break;
        case Part::RoutedExpert: out.routed_experts += distinct_experts[l] * matrix_bytes(m); break;
      }
    });
    // Beside the matrices: the attention's norms and sinks, both sublayer norms, V4.1's latent
    // compressor and index-key norms, mHC base and scale, the router's bias (tid2eid rows of hash
    // layers: B rows).
    out.attention += floats_bytes(a.q_norm) + floats_bytes(a.kv_norm) + floats_bytes(a.sink) +
                     floats_bytes(layer.attn_norm) + floats_bytes(layer.ffn_norm);
    if (a.latent_compressor) out.attention += floats_bytes(a.latent_compressor->norm);
    if (a.index_keys) out.attention += floats_bytes(a.index_keys->k_norm);
    for (const auto* hc : {&layer.attn_hc, &layer.ffn_hc}) out.mhc += floats_bytes(hc->base) + floats_bytes(hc->scale);
    out.router += floats_bytes(layer.moe.bias);
    if (!layer.moe.tid2eid.empty()) out.router += 4.0 * static_cast<double>(batch * layer.moe.top_k);
  }
  // Head: the final norm and every row of the LM head (V4.1 has no hyper-head; V4's is mHC-sized).
  const auto head = model.head_weights();
  out.head = matrix_bytes(*head.head) + 4.0 * static_cast<double>(head.norm.size());
  if (head.hc_head) out.head += matrix_bytes(head.hc_head->fn);
  // Embedding: one row per token.
  const WeightMatrix& embed = model.embedding();
  out.embedding = static_cast<double>(batch) * matrix_bytes(embed) / static_cast<double>(std::max<int64_t>(1, embed.rows));
  // Engram (estimate from the config: the Engram weights are not exposed): per Engram layer the
  // wkv projection [(n + 1) D, lookups * head_dim] at 2 bytes, q/k gate weights in f32, and each
  // token's `lookups` table rows of head_dim FP8 codes + a scale per 32.
  if (const auto* engram = model.engram()) {
    const auto& e = c.engram;
    const double lookups = static_cast<double>(engram->cols());
    for (int i = 0; i < engram->layers(); ++i) {
      out.engram += 2.0 * static_cast<double>((c.hc_mult + 1) * c.hidden_size) * lookups * static_cast<double>(e.head_dim);
      out.engram += 2.0 * 4.0 * static_cast<double>(c.hc_mult * c.hidden_size);
      out.engram += static_cast<double>(batch) * lookups * static_cast<double>(e.head_dim + (e.head_dim + 31) / 32);
    }
  }
  // Cache (estimate, per sequence at T = context + 1 positions): every layer reads its window
  // rows, min(T, sliding_window), at the stored row size; a ratio > 0 layer attends
  // min(index_topk, T / ratio) compressed entries (V4 HCA: all of them) of its kv source; an
  // index source (V4: CSA layer) scores the index keys of every entry (V4.1 index sources after
  // the candidate source: only inside candidate_topk_blocks blocks of candidate_block_size).
  const auto layout = model.cache_layout(64);
  const int64_t T = context + 1;
  double per_sequence = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    per_sequence += static_cast<double>(std::min(T, c.sliding_window) * layout.layers[l].window_row_bytes);
    const int64_t ratio = c.compress_ratio(l);
    if (ratio == 0) continue;
    const int64_t source = c.kv_source_of(l);
    const auto& owner = layout.layers[static_cast<std::size_t>(source)];
    const int64_t entries = T / ratio;
    const bool attends_all = c.family == deepinfer::ModelFamily::V4 && ratio != 4;
    per_sequence += static_cast<double>((attends_all ? entries : std::min(entries, c.index_topk)) * owner.entry_bytes);
    const bool scores = c.family == deepinfer::ModelFamily::V4 ? ratio == 4 : c.is_index_source(l);
    if (scores) {
      int64_t scored = entries;
      if (c.family == deepinfer::ModelFamily::V41 && c.candidate_source_layer_id >= 0 && c.candidate_source_layer_id < l)
        scored = std::min(entries, c.candidate_topk_blocks * c.candidate_block_size);
      per_sequence += static_cast<double>(scored * owner.index_key_bytes);
    }
  }
  out.cache = static_cast<double>(batch) * per_sequence;
  return out;
}

// FLOPs of one prefill token's matrix products (2 x the weights it multiplies: the attention
// projections, compressors and indexer projections, both mHC sites' fn, the router, the shared
// expert(s) and top_k routed experts). Not counted: attention scores and the LM head (a prefill
// call asks for no logits). Prefill tokens/s times this, against a measured matrix rate, is the
// prefill's share of it (docs/BENCHMARKS.md).
double matmul_flops_per_token(const Model& model) {
  double weights = 0;
  for (const auto& layer : model.layers())
    for_each_token_matrix(layer, [&](const WeightMatrix& m, Part part) {
      const double count = static_cast<double>(m.rows) * static_cast<double>(m.cols);
      weights += part == Part::RoutedExpert ? static_cast<double>(layer.moe.top_k) * count : count;
    });
  return 2.0 * weights;
}

// Expected distinct experts among B tokens each picking k of E uniformly: E (1 - (1 - k/E)^B).
double uniform_distinct_experts(int64_t experts, int64_t top_k, int64_t batch) {
  const double e = static_cast<double>(experts);
  return e * (1.0 - std::pow(1.0 - static_cast<double>(top_k) / e, static_cast<double>(batch)));
}

// ---------------------------------------------------------------------------------------------
// Host copy bandwidth: memcpy between two 1 GB buffers, split over the thread pool the model
// runs on (each thread copies a contiguous slice); read + written bytes per second, median of 5.
deepinfer::bench::CopyBandwidth host_copy_bandwidth(int64_t bytes, int repeats) {
  std::unique_ptr<char[]> source(new char[static_cast<std::size_t>(bytes)]);
  std::unique_ptr<char[]> target(new char[static_cast<std::size_t>(bytes)]);
  deepinfer::ThreadPool& pool = deepinfer::default_thread_pool();
  const int64_t chunks = pool.size();
  auto copy = [&] {
    pool.parallel_for(chunks, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const auto [from, to] = deepinfer::ThreadPool::chunk_bounds(bytes, chunks, i);
        std::memcpy(target.get() + from, source.get() + from, static_cast<std::size_t>(to - from));
      }
    });
  };
  pool.parallel_for(chunks, [&](int64_t begin, int64_t end) {  // first touch, by the threads that copy
    for (int64_t i = begin; i < end; ++i) {
      const auto [from, to] = deepinfer::ThreadPool::chunk_bounds(bytes, chunks, i);
      std::memset(source.get() + from, 1, static_cast<std::size_t>(to - from));
      std::memset(target.get() + from, 0, static_cast<std::size_t>(to - from));
    }
  });
  copy();
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    copy();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  const double median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  deepinfer::bench::CopyBandwidth out;
  out.bytes = bytes;
  out.median_seconds = median;
  out.bytes_per_second = 2.0 * static_cast<double>(bytes) / median;
  out.how = deepinfer::str_cat("memcpy host to host, ", static_cast<double>(bytes) / 1e9, " GB split over ", chunks,
                               " thread(s), median of ", n, "; read + written");
  return out;
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

struct BatchResult {
  int64_t batch = 0;
  int64_t context = 0;
  int64_t prefilled = 0;  // sequences prefilled (the others copied, --shared-prefill)
  double prefill_seconds = 0;
  std::vector<double> ms_per_step;  // one per repeat
  double median_ms = 0;
  double tokens_per_second = 0;
  std::vector<double> distinct_experts;  // per layer
  bool traced = false;
  double uniform_experts = 0;  // the uniform-routing estimate per layer, for comparison
  StepBytes bytes;
  double bound_ms = 0;
  double percent_of_bound = 0;
  int64_t nonfinite_logits = 0;  // in the last timed step (random weights should keep this 0)
  double logit_rms = 0;          // of the finite ones
  struct Verify {
    int64_t rows = 0;
    double all_rows_ms = 0;   // every row's logits to the host
    double last_row_ms = 0;   // the last row's only
  };
  std::vector<Verify> verify;
};

class TokenSource {
 public:
  TokenSource(const ModelConfig& config, uint64_t seed) : rng_(seed), config_(config) {}
  int32_t next() {
    // Ids in [3, vocab): clear of bos / eos / pad in the releases, and never the image token.
    std::uniform_int_distribution<int64_t> pick(std::min<int64_t>(3, config_.vocab_size - 1), config_.vocab_size - 1);
    for (;;) {
      const int64_t id = pick(rng_);
      if (!config_.image_token_id || id != *config_.image_token_id) return static_cast<int32_t>(id);
    }
  }

 private:
  std::mt19937_64 rng_;
  const ModelConfig& config_;
};

// `to` (a fresh sequence of the same block size) becomes a copy of `from`: its blocks, then the
// rest of the state through a snapshot, in whatever memory the backend keeps them.
void copy_sequence(const Model& model, const SequenceState& from, SequenceState& to) {
  to.pages.cover(from.length);
  for (int64_t k = 0; k < Model::blocks_for(from.length, from.pages.block_tokens); ++k)
    to.pages.memory->copy(to.pages.blocks[static_cast<std::size_t>(k)], from.pages.blocks[static_cast<std::size_t>(k)],
                          from.pages.block_bytes);
  model.restore_snapshot(to, model.save_snapshot(from));
}

BatchResult run_batch(const Model& model, const Options& o, int64_t batch, double bandwidth) {
  const ModelConfig& c = model.config();
  const int64_t vocab = c.vocab_size;
  TokenSource tokens(c, o.seed * 1000003 + static_cast<uint64_t>(batch));
  std::vector<SequenceState> sequences;
  sequences.reserve(static_cast<std::size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) sequences.push_back(model.new_sequence());

  BatchResult result;
  result.batch = batch;
  result.context = o.context;

  // Prefill: every sequence advances by `chunk` tokens per call, at most prefill_tokens rows.
  // --shared-prefill: only the first does, and the others start as copies of it (blocks and
  // snapshot), which makes long contexts at large batches affordable to set up.
  const auto prefill_start = Clock::now();
  const int64_t prefilled = o.shared_prefill ? 1 : batch;
  result.prefilled = prefilled;
  const int64_t chunk = std::max<int64_t>(1, o.prefill_tokens / prefilled);
  std::vector<int32_t> ids;
  std::vector<BatchItem> items;
  for (int64_t done = 0; done < o.context;) {
    const int64_t take = std::min(chunk, o.context - done);
    ids.resize(static_cast<std::size_t>(prefilled * take));
    for (int32_t& id : ids) id = tokens.next();
    items.clear();
    for (int64_t i = 0; i < prefilled; ++i)
      items.push_back(BatchItem{.sequence = &sequences[static_cast<std::size_t>(i)],
                                .tokens = std::span<const int32_t>(ids.data() + i * take, static_cast<std::size_t>(take)),
                                .logits = {}, .rows = LogitRows::None});
    model.forward_batch(items);
    done += take;
  }
  if (o.shared_prefill)
    for (int64_t i = 1; i < batch; ++i) copy_sequence(model, sequences.front(), sequences[static_cast<std::size_t>(i)]);
  result.prefill_seconds = std::chrono::duration<double>(Clock::now() - prefill_start).count();

  std::vector<float> logits(static_cast<std::size_t>(batch * vocab));
  ids.resize(static_cast<std::size_t>(batch));
  // As the engine steps: a backend that draws tokens itself (CUDA) draws greedy tokens on the
  // device and returns only those (a decode step it may replay as a graph); the others return
  // the logits. The last step returns logits on every backend, for the sanity figures below.
  const bool draws = model.backend().draws_tokens();
  std::vector<deepinfer::model::TokenDraw> greedy(static_cast<std::size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) {
    greedy[static_cast<std::size_t>(i)].row = i;
    greedy[static_cast<std::size_t>(i)].temperature = 0.0f;
  }
  std::vector<deepinfer::model::DrawnToken> drawn(static_cast<std::size_t>(batch));
  auto decode_step = [&](bool want_logits) {
    for (int32_t& id : ids) id = tokens.next();
    items.clear();
    const bool drawing = draws && !want_logits;
    for (int64_t i = 0; i < batch; ++i)
      items.push_back(BatchItem{.sequence = &sequences[static_cast<std::size_t>(i)],
                                .tokens = std::span<const int32_t>(&ids[static_cast<std::size_t>(i)], 1),
                                .logits = drawing ? std::span<float>() : std::span<float>(logits.data() + i * vocab, static_cast<std::size_t>(vocab)),
                                .rows = LogitRows::Last});
    if (drawing) {
      for (int64_t i = 0; i < batch; ++i) greedy[static_cast<std::size_t>(i)].position = sequences[static_cast<std::size_t>(i)].length;
      model.forward_batch_draw(items, greedy, drawn);
    } else {
      model.forward_batch(items);
    }
  };

  // Routing of one step: the first warm-up step, each sequence alone with a trace.
  result.uniform_experts = uniform_distinct_experts(c.n_routed_experts, c.num_experts_per_tok, batch);
  result.distinct_experts.assign(static_cast<std::size_t>(c.num_layers), result.uniform_experts);
  int64_t warmup = o.warmup;
  if (o.trace) {
    try {
      std::vector<std::set<int32_t>> touched(static_cast<std::size_t>(c.num_layers));
      for (int32_t& id : ids) id = tokens.next();
      for (int64_t i = 0; i < batch; ++i) {
        deepinfer::model::ForwardTrace trace;
        model.forward(sequences[static_cast<std::size_t>(i)], std::span<const int32_t>(&ids[static_cast<std::size_t>(i)], 1),
                      std::span<float>(logits.data(), static_cast<std::size_t>(vocab)), LogitRows::Last, &trace);
        for (std::size_t l = 0; l < trace.routing.size() && l < touched.size(); ++l)
          for (const auto& routing : trace.routing[l]) touched[l].insert(routing.experts.begin(), routing.experts.end());
      }
      for (std::size_t l = 0; l < touched.size(); ++l) result.distinct_experts[l] = static_cast<double>(touched[l].size());
      result.traced = true;
      warmup = std::max<int64_t>(0, warmup - 1);
    } catch (const Error& e) {
      std::fprintf(stderr, "decode_step_bench: tracing the routing failed (%s); using the uniform-routing estimate\n", e.what());
    }
  }
  // A decode step's CUDA graph is captured at its key's second step (backend/cuda/step_graphs.h):
  // two untimed steps at least, so that the timed ones replay it.
  if (draws && !o.enforce_eager) warmup = std::max<int64_t>(warmup, 2);
  for (int64_t s = 0; s < warmup; ++s) decode_step(false);

  for (int64_t r = 0; r < o.repeat; ++r) {
    const auto start = Clock::now();
    for (int64_t s = 0; s < o.steps; ++s) decode_step(false);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    result.ms_per_step.push_back(1000.0 * seconds / static_cast<double>(o.steps));
  }
  // Sanity of the random weights: one more step's logits should all be finite.
  decode_step(true);
  double square_sum = 0;
  for (float v : logits) {
    if (std::isfinite(v)) square_sum += static_cast<double>(v) * v;
    else ++result.nonfinite_logits;
  }
  result.logit_rms = std::sqrt(square_sum / static_cast<double>(std::max<std::size_t>(1, logits.size())));

  // Verification steps: W rows per sequence. The sequences keep growing, W per step.
  std::vector<float> verify_logits;
  auto verify_step = [&](int64_t width, LogitRows rows) {
    ids.resize(static_cast<std::size_t>(batch * width));
    for (int32_t& id : ids) id = tokens.next();
    verify_logits.resize(static_cast<std::size_t>(batch * (rows == LogitRows::All ? width : 1) * vocab));
    items.clear();
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t logit_rows = rows == LogitRows::All ? width : 1;
      items.push_back(BatchItem{.sequence = &sequences[static_cast<std::size_t>(i)],
                                .tokens = std::span<const int32_t>(ids.data() + i * width, static_cast<std::size_t>(width)),
                                .logits = std::span<float>(verify_logits.data() + i * logit_rows * vocab,
                                                           static_cast<std::size_t>(logit_rows * vocab)),
                                .rows = rows});
    }
    model.forward_batch(items);
  };
  auto timed_verify = [&](int64_t width, LogitRows rows) {
    for (int64_t s = 0; s < std::max<int64_t>(o.warmup, 1); ++s) verify_step(width, rows);
    std::vector<double> ms;
    for (int64_t r = 0; r < o.repeat; ++r) {
      const auto start = Clock::now();
      for (int64_t s = 0; s < o.steps; ++s) verify_step(width, rows);
      ms.push_back(1000.0 * std::chrono::duration<double>(Clock::now() - start).count() / static_cast<double>(o.steps));
    }
    return median_of(ms);
  };
  for (int64_t width : o.verify_rows)
    result.verify.push_back({width, timed_verify(width, LogitRows::All), timed_verify(width, LogitRows::Last)});
  result.median_ms = median_of(result.ms_per_step);
  result.tokens_per_second = static_cast<double>(batch) * 1000.0 / result.median_ms;
  // Bytes at the context of the middle of the timed steps.
  const int64_t mid_context = o.context + o.warmup + (o.repeat * o.steps) / 2;
  result.bytes = step_bytes(model, batch, mid_context, result.distinct_experts);
  result.bound_ms = 1000.0 * result.bytes.total() / bandwidth;
  result.percent_of_bound = 100.0 * result.bound_ms / result.median_ms;
  return result;
}

double gb(double bytes) { return bytes / 1e9; }
double mb(double bytes) { return bytes / 1e6; }

nlohmann::json bytes_json(const StepBytes& b) {
  return {{"attention", b.attention},         {"mhc", b.mhc},
          {"router", b.router},               {"shared_experts", b.shared_experts},
          {"routed_experts", b.routed_experts}, {"head", b.head},
          {"embedding", b.embedding},         {"engram", b.engram},
          {"weights", b.weights()},           {"cache_estimate", b.cache},
          {"total", b.total()}};
}

int run(const Options& o) {
  std::unique_ptr<deepinfer::ThreadPool> pool;
  std::optional<deepinfer::ScopedDefaultThreadPool> use_pool;
  if (o.threads > 0) {
    pool = std::make_unique<deepinfer::ThreadPool>(o.threads);
    use_pool.emplace(*pool);
  }
  deepinfer::backend::DeviceSpec spec = deepinfer::backend::parse_device(o.device);
  spec.cuda_graphs = !o.enforce_eager;
  spec.batch_invariant = o.batch_invariant;
  const auto load_start = Clock::now();
  deepinfer::model::LoadOptions load_options;
  load_options.tokenizer = o.tokenizer;
  Model model = Model::load(o.model, load_options);
  const double load_seconds = std::chrono::duration<double>(Clock::now() - load_start).count();
  std::fprintf(stderr, "decode_step_bench: %s loaded in %.1f s\n%s", o.model.c_str(), load_seconds,
               deepinfer::describe(model.config()).c_str());
  const auto attach_start = Clock::now();
  const std::string device_line = deepinfer::backend::attach_device(model, spec);
  const double attach_seconds = std::chrono::duration<double>(Clock::now() - attach_start).count();
  std::fprintf(stderr, "%s (attached in %.1f s); threads %d\n", device_line.c_str(), attach_seconds,
               deepinfer::default_thread_pool().size());

  const deepinfer::bench::CopyBandwidth copy =
      spec.kind == deepinfer::backend::DeviceSpec::Kind::Cuda
          ? deepinfer::bench::cuda_copy_bandwidth(spec.index, static_cast<int64_t>(o.copy_gb * 1e9), 5)
          : host_copy_bandwidth(int64_t{1000} * 1000 * 1000, 5);
  std::fprintf(stderr, "copy bandwidth: %.1f GB/s (%s)\n", copy.bytes_per_second / 1e9, copy.how.c_str());

  if (o.speculation_profile > 0) {
    if (!model.drafter()) fail("--speculation-profile needs a model with a DSpark drafter");
    const int64_t block = model.drafter()->block_size();
    const auto profile_start = Clock::now();
    const deepinfer::engine::StepRateTable table =
        deepinfer::engine::profile_step_rates(model, o.speculation_profile, block);
    std::printf("\nspeculation profile (engine profile_step_rates, max_tokens %lld, blocks of %lld; %.1f s):\n",
                static_cast<long long>(o.speculation_profile), static_cast<long long>(block),
                std::chrono::duration<double>(Clock::now() - profile_start).count());
    std::printf("| rows | verification pass ms | sequences | drafter call ms |\n|---|---|---|---|\n");
    for (int64_t rows = 1; rows <= std::min<int64_t>(o.speculation_profile, 256); rows *= 2) {
      const int64_t sequences = rows <= o.speculation_profile / (block + 1) ? rows : 0;
      if (sequences > 0)
        std::printf("| %lld | %.3f | %lld | %.3f |\n", static_cast<long long>(rows), 1e3 / table.steps_per_second(rows),
                    static_cast<long long>(sequences), 1e3 * table.draft_seconds(sequences));
      else
        std::printf("| %lld | %.3f | | |\n", static_cast<long long>(rows), 1e3 / table.steps_per_second(rows));
    }
  }

  std::vector<BatchResult> results;
  const double flops_per_token = matmul_flops_per_token(model);
  for (int64_t batch : o.batches) {
    std::fprintf(stderr, "batch %lld: prefilling %lld sequences to %lld tokens ...\n", static_cast<long long>(batch),
                 static_cast<long long>(batch), static_cast<long long>(o.context));
    results.push_back(run_batch(model, o, batch, copy.bytes_per_second));
    const BatchResult& r = results.back();
    double mean_experts = 0;
    for (double d : r.distinct_experts) mean_experts += d;
    mean_experts /= static_cast<double>(std::max<std::size_t>(1, r.distinct_experts.size()));
    const double prefill_rate = static_cast<double>(r.prefilled * o.context) / std::max(r.prefill_seconds, 1e-9);
    std::fprintf(stderr,
                 "batch %lld: prefill %.2f s (%.0f tok/s, %.1f TFLOP/s of matrix products at %.3g GFLOP a token); "
                 "ms/step per repeat:",
                 static_cast<long long>(batch), r.prefill_seconds, prefill_rate, prefill_rate * flops_per_token / 1e12,
                 flops_per_token / 1e9);
    for (double ms : r.ms_per_step) std::fprintf(stderr, " %.3f", ms);
    std::fprintf(stderr, "; last logits rms %.3g", r.logit_rms);
    if (r.nonfinite_logits > 0)
      std::fprintf(stderr, "\n  WARNING: %lld non-finite logits in the last step", static_cast<long long>(r.nonfinite_logits));
    std::fprintf(stderr,
                 "\n  distinct routed experts per layer: %.1f (%s; uniform routing would give %.1f)\n"
                 "  MB read/step: attention %.2f, mHC %.2f, router %.2f, shared experts %.2f, routed experts %.2f, "
                 "head %.2f, embedding %.3f, engram %.2f, cache (estimate) %.3f; total %.2f MB\n",
                 mean_experts, r.traced ? "traced" : "uniform-routing estimate", r.uniform_experts,
                 mb(r.bytes.attention), mb(r.bytes.mhc), mb(r.bytes.router), mb(r.bytes.shared_experts),
                 mb(r.bytes.routed_experts), mb(r.bytes.head), mb(r.bytes.embedding), mb(r.bytes.engram),
                 mb(r.bytes.cache), mb(r.bytes.total()));
  }

  FILE* table = o.json ? stderr : stdout;
  std::fprintf(table, "\n%s, %s; copy bandwidth %.1f GB/s\n", o.model.c_str(), device_line.c_str(),
               copy.bytes_per_second / 1e9);
  std::fprintf(table, "| batch | context | ms/step (median) | tok/s | GB read/step | bound ms | %% of bound | experts/layer |\n");
  std::fprintf(table, "|---|---|---|---|---|---|---|---|\n");
  for (const BatchResult& r : results) {
    double mean_experts = 0;
    for (double d : r.distinct_experts) mean_experts += d;
    mean_experts /= static_cast<double>(std::max<std::size_t>(1, r.distinct_experts.size()));
    std::fprintf(table, "| %lld | %lld | %.3f | %.1f | %.4f | %.3f | %.1f%% | %.1f%s |\n", static_cast<long long>(r.batch),
                 static_cast<long long>(r.context), r.median_ms, r.tokens_per_second, gb(r.bytes.total()), r.bound_ms,
                 r.percent_of_bound, mean_experts, r.traced ? "" : " (uniform est.)");
  }
  std::fprintf(table,
               "context = prefilled tokens; the timed steps run at context + %lld .. context + %lld. bound = bytes read "
               "per step / copy bandwidth.\n",
               static_cast<long long>(o.warmup), static_cast<long long>(o.warmup + o.repeat * o.steps));
  if (!o.verify_rows.empty()) {
    std::fprintf(table, "\nverification steps (W rows per sequence, after the decode steps above):\n");
    std::fprintf(table, "| batch | W | ms/step, all rows' logits to host | vs W=1 | ms/step, last row's only | vs W=1 |\n");
    std::fprintf(table, "|---|---|---|---|---|---|\n");
    for (const BatchResult& r : results) {
      const double all_one = r.verify.empty() ? 0 : r.verify.front().all_rows_ms;
      const double last_one = r.verify.empty() ? 0 : r.verify.front().last_row_ms;
      for (const BatchResult::Verify& v : r.verify)
        std::fprintf(table, "| %lld | %lld | %.3f | %.2fx | %.3f | %.2fx |\n", static_cast<long long>(r.batch),
                     static_cast<long long>(v.rows), v.all_rows_ms, v.all_rows_ms / all_one, v.last_row_ms,
                     v.last_row_ms / last_one);
    }
  }

  if (o.json) {
    nlohmann::json out;
    out["model"] = o.model;
    out["device"] = device_line;
    out["threads"] = deepinfer::default_thread_pool().size();
    out["load_seconds"] = load_seconds;
    out["attach_seconds"] = attach_seconds;
    out["copy_bandwidth"] = {{"bytes", copy.bytes},
                             {"median_seconds", copy.median_seconds},
                             {"bytes_per_second", copy.bytes_per_second},
                             {"how", copy.how}};
    out["steps"] = o.steps;
    out["repeat"] = o.repeat;
    out["warmup"] = o.warmup;
    out["results"] = nlohmann::json::array();
    for (const BatchResult& r : results)
      out["results"].push_back({{"batch", r.batch},
                                {"context", r.context},
                                {"prefill_seconds", r.prefill_seconds},
                                {"ms_per_step", r.ms_per_step},
                                {"median_ms_per_step", r.median_ms},
                                {"tokens_per_second", r.tokens_per_second},
                                {"distinct_experts_per_layer", r.distinct_experts},
                                {"experts_traced", r.traced},
                                {"uniform_experts_per_layer", r.uniform_experts},
                                {"bytes_per_step", bytes_json(r.bytes)},
                                {"bound_ms", r.bound_ms},
                                {"percent_of_bound", r.percent_of_bound},
                                {"nonfinite_logits", r.nonfinite_logits},
                                {"logit_rms", r.logit_rms},
                                {"verify", [&] {
                                   nlohmann::json rows = nlohmann::json::array();
                                   for (const BatchResult::Verify& v : r.verify)
                                     rows.push_back({{"rows", v.rows}, {"all_rows_ms", v.all_rows_ms},
                                                     {"last_row_ms", v.last_row_ms}});
                                   return rows;
                                 }()}});
    std::printf("%s\n", out.dump().c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    return run(options);
  } catch (const Error& e) {
    std::fprintf(stderr, "decode_step_bench: %s\n", e.what());
    return 1;
  }
}

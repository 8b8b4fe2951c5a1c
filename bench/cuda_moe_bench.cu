// The routed experts of one MoE layer on one GPU (issue 13): the expert kernels of
// kernels/cuda/expert_mma.cu against the byte bound, on V4.1-Flash's and V4-Flash's expert shapes
// (FP4 e2m1 with E8M0 scales per 32 columns, the release encoding). A plain main().
//
//   cuda_moe_bench [--model v41,v4] [--tokens 1,16,64,256] [--repeats 20] [--warmup 3] [--layers 2]
//                  [--copy-gb 4] [--device N] [--seed S]
//
// Tiles: as the backend cuts them (kernels::cuda::expert_tile_pairs: 8 pairs where a call's pairs
// average 6 an expert, else 4); DEEPINFER_BENCH_TILE_PAIRS=4 or 8 forces one size. Where the
// backend would take the wgmma kernels (expert_wgmma_tile_pairs: prefill-sized calls on Hopper;
// DEEPINFER_CUDA_EXPERT_WGMMA=16 / 32 forces them), their chain runs too and its y is compared
// with expert_mma's bit for bit. Grids: as the backend picks them (ExpertGrid::kAuto: the narrow
// one where the wide grid would leave the SMs few warps); DEEPINFER_BENCH_EXPERT_GRID=wide or
// narrow forces one.
//
// What a decode step's MoE layer runs for its routed experts, each variant one CUDA graph of
// back-to-back calls (each call on the next layer's weights, --layers sets of all experts, so the
// weights come from HBM), replayed --repeats times after --warmup; the median per call:
//   experts   moe_sort, expert_tiles, split_rows, expert_gate_up, expert_down (the whole chain)
//   gate_up   expert_gate_up alone (w1 and w3 with the SwiGLU), on the chain's sorted pairs
//   down      expert_down alone (w2)
//   wgmma     moe_sort, expert_tiles, expert_gate_up_wgmma, expert_down_wgmma (prefill-sized calls)
//   wg gate_up / wg down   the two wgmma launches alone
//             (all on codes in expert tiles, WeightLayout::ExpertTiles, as the CUDA weight store
//             uploads routed experts: the only layout the expert kernels take)
//   read rows / read tiled   gate_up's weight codes read with no arithmetic, in gate_up's order and
//             as contiguous runs (read_codes_kernel): what the access pattern alone reaches
// Routing: each token's top-k distinct experts drawn uniformly (seeded), the worst case for the
// number of distinct experts a step touches (real routers are skewed, so they touch fewer).
//
// The bound: the bytes the call must read (codes + one E8M0 byte per 32 columns of every distinct
// expert the routing touched, for the matrices the variant reads; activations are ignored, they are
// under 0.2% of them) over a device-to-device cudaMemcpy's read + written bytes per second measured
// at the start of the run (cuda_copy_bandwidth.cu).
//
// Check (a broken kernel must not give a fast number silently): for a few sorted pairs of each
// token count, y = w2 swiglu(w1 x, w3 x) against a host f32 reference from the same codes: max
// |y - ref| <= 1e-4 max |ref| (the kernels keep the activations' 24 bits; only the order of the
// sums differs). A failed check makes the exit status 1.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "copy_bandwidth.h"
#include "core/error.h"
#include "core/float_formats.h"
#include "cuda_bench_common.cuh"
#include "integer_options.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/kernels.h"

namespace {

using deepinfer::kernels::ScaleEncoding;
using deepinfer::kernels::WeightEncoding;
using deepinfer::kernels::WeightMatrix;
namespace kc = deepinfer::kernels::cuda;

constexpr int kScaleColumns = 32;
constexpr float kSwigluLimit = 10.0f;  // V4.1-Flash's swiglu_limit
constexpr double kTolerance = 1e-4;
constexpr int kCheckedPairs = 3;

struct ExpertShape {
  std::string model;
  int64_t experts = 0, top_k = 0, hidden = 0, inner = 0;
};

const ExpertShape kV41{"V4.1-Flash", 384, 6, 5120, 2304};
const ExpertShape kV4{"V4-Flash", 256, 6, 4096, 2048};

// Stored bytes of one FP4 matrix: codes + E8M0 scales.
int64_t matrix_bytes(int64_t rows, int64_t cols) { return rows * cols / 2 + rows * (cols / kScaleColumns); }

__global__ void fill_bytes_kernel(uint8_t* out, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = static_cast<uint8_t>(random_bits(seed, static_cast<uint64_t>(i)));
}

// Reads the weight codes gate_up reads (w1 and w3 rows of each tile's expert: 64 rows a block, 16 of
// each a warp), with no arithmetic: in gate_up's order (Tiled = false: per 128-column chunk each
// lane 16 bytes of rows g and g + 8, so a load instruction touches 8 rows) or as if each warp's 16
// rows of a matrix were one contiguous run (Tiled = true: 512 contiguous bytes a load). What the
// access pattern alone reaches, against the kernel that also decodes and multiplies.
constexpr int kReadWarps = 4;

__device__ __forceinline__ uint4 read_streaming(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <bool Tiled>
__global__ void read_codes_kernel(const int4* __restrict__ tiles, const int32_t* __restrict__ tile_count,
                                  const WeightMatrix* __restrict__ w1, const WeightMatrix* __restrict__ w3,
                                  int64_t inner, int64_t cols, uint32_t* __restrict__ sink) {
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
  const int64_t first_row = (static_cast<int64_t>(blockIdx.x) * kReadWarps + static_cast<int>(threadIdx.x) / 32) * 16;
  if (first_row >= inner) return;
  const int count = *tile_count;
  const int64_t row_bytes = cols / 2;
  uint32_t acc = 0;
  for (int64_t index = blockIdx.y; index < count; index += gridDim.y) {
    const int4 tile = tiles[index];
    if (tile.x < 0) continue;
    const uint8_t* base[2] = {static_cast<const uint8_t*>(w1[tile.x].data), static_cast<const uint8_t*>(w3[tile.x].data)};
    if (!Tiled) {
      const uint8_t* p[4];
      for (int k = 0; k < 4; ++k) p[k] = base[k / 2] + (first_row + g + 8 * (k % 2)) * row_bytes + q * 16;
#pragma unroll 4
      for (int64_t c = 0; c < cols / 128; ++c)
        for (int k = 0; k < 4; ++k) {
          const uint4 v = read_streaming(p[k] + c * 64);
          acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
    } else {
      for (int m = 0; m < 2; ++m) {
        const uint8_t* run = base[m] + first_row * row_bytes;
#pragma unroll 4
        for (int64_t at = lane * 16; at < 16 * row_bytes; at += 512) {
          const uint4 v = read_streaming(run + at);
          acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
      }
    }
  }
  if (acc == 0x9E3779B9u) *sink = acc;  // keeps the loads
}

// One matrix kind (w1, w3 or w2) of every expert of one layer: codes [experts][rows][cols / 2] and
// scales [experts][rows][cols / 32], and the device array of their descriptors.
struct ExpertMatrices {
  int64_t rows = 0, cols = 0, experts = 0;
  DeviceBuffer codes, scales, descriptors;
  DeviceBuffer tiled_codes, tiled_descriptors;  // the same codes in expert tiles (the engine's layout)

  ExpertMatrices(int64_t rows_, int64_t cols_, int64_t experts_, uint64_t seed)
      : rows(rows_), cols(cols_), experts(experts_) {
    const int64_t code_bytes = experts * rows * cols / 2, scale_bytes = experts * rows * (cols / kScaleColumns);
    codes = DeviceBuffer(static_cast<std::size_t>(code_bytes), "expert codes");
    scales = DeviceBuffer(static_cast<std::size_t>(scale_bytes), "expert scales");
    fill_bytes_kernel<<<grid_for(code_bytes), 256>>>(codes.as<uint8_t>(), code_bytes, seed);
    launched("fill_bytes_kernel");
    fill_e8m0_kernel<<<grid_for(scale_bytes), 256>>>(scales.as<uint8_t>(), scale_bytes, seed + 1);
    launched("fill_e8m0_kernel");
    std::vector<WeightMatrix> host(static_cast<std::size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) {
      WeightMatrix& m = host[static_cast<std::size_t>(e)];
      m.encoding = WeightEncoding::FP4_E2M1;
      m.rows = rows;
      m.cols = cols;
      m.data = codes.bytes_at(static_cast<std::size_t>(e * rows * cols / 2));
      m.scale_encoding = ScaleEncoding::E8M0;
      m.scales = scales.bytes_at(static_cast<std::size_t>(e * rows * (cols / kScaleColumns)));
      m.block_rows = 1;
      m.block_cols = kScaleColumns;
      if (!kc::expert_tiles_fit(m)) fail("cuda_moe_bench: the expert kernels do not take a ", rows, " x ", cols, " matrix");
    }
    descriptors = DeviceBuffer(host.size() * sizeof(WeightMatrix), "expert descriptors");
    check(cudaMemcpy(descriptors.as<void>(), host.data(), host.size() * sizeof(WeightMatrix), cudaMemcpyHostToDevice),
          "cudaMemcpy (descriptors)");
    tiled_codes = DeviceBuffer(static_cast<std::size_t>(code_bytes), "expert codes in tiles");
    for (int64_t e = 0; e < experts; ++e) {
      const auto offset = static_cast<std::size_t>(e * rows * cols / 2);
      kc::tile_expert_codes(codes.bytes_at(offset), tiled_codes.bytes_at(offset), rows, cols / 2, nullptr);
      WeightMatrix& m = host[static_cast<std::size_t>(e)];
      m.data = tiled_codes.bytes_at(offset);
      m.layout = deepinfer::kernels::WeightLayout::ExpertTiles;
    }
    tiled_descriptors = DeviceBuffer(host.size() * sizeof(WeightMatrix), "tiled expert descriptors");
    check(cudaMemcpy(tiled_descriptors.as<void>(), host.data(), host.size() * sizeof(WeightMatrix),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy (descriptors)");
  }

  const WeightMatrix* device(bool tiled) const {
    return (tiled ? tiled_descriptors : descriptors).as<WeightMatrix>();
  }

  // Expert e's matrix dequantised to f32 on the host, [rows][cols].
  std::vector<float> host_matrix(int64_t e) const {
    std::vector<uint8_t> c(static_cast<std::size_t>(rows * cols / 2)), s(static_cast<std::size_t>(rows * (cols / kScaleColumns)));
    check(cudaMemcpy(c.data(), codes.bytes_at(static_cast<std::size_t>(e * rows * cols / 2)), c.size(),
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy (expert codes)");
    check(cudaMemcpy(s.data(), scales.bytes_at(static_cast<std::size_t>(e * rows * (cols / kScaleColumns))), s.size(),
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy (expert scales)");
    std::vector<float> w(static_cast<std::size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < cols; ++col) {
        const uint8_t byte = c[static_cast<std::size_t>((r * cols + col) / 2)];
        const float scale = std::ldexp(1.0f, s[static_cast<std::size_t>(r * (cols / kScaleColumns) + col / kScaleColumns)] - 127);
        w[static_cast<std::size_t>(r * cols + col)] =
            deepinfer::e2m1_to_float(col % 2 == 0 ? byte & 0x0F : byte >> 4) * scale;
      }
    return w;
  }
};

struct Layer {
  ExpertMatrices w1, w3, w2;
  Layer(const ExpertShape& s, uint64_t seed)
      : w1(s.inner, s.hidden, s.experts, seed), w3(s.inner, s.hidden, s.experts, seed + 10),
        w2(s.hidden, s.inner, s.experts, seed + 20) {}
};

// Each token's top_k distinct experts, ascending (the router's order), uniformly drawn.
std::vector<int32_t> random_routing(const ExpertShape& s, int64_t tokens, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> all(static_cast<std::size_t>(s.experts));
  for (int64_t e = 0; e < s.experts; ++e) all[static_cast<std::size_t>(e)] = static_cast<int32_t>(e);
  std::vector<int32_t> chosen;
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> top(all.begin(), all.begin() + s.top_k);
    std::sort(top.begin(), top.end());
    chosen.insert(chosen.end(), top.begin(), top.end());
  }
  return chosen;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

struct Options {
  std::vector<std::string> models{"v41", "v4"};
  std::vector<int64_t> tokens{1, 16, 64, 256};
  int repeats = 20, warmup = 3, layers = 2, device = 0;
  double copy_gb = 4;
  uint64_t seed = 7;
};

[[noreturn]] void usage(const std::string& message, int status = 2) {
  if (!message.empty()) std::fprintf(stderr, "%s\n", message.c_str());
  std::fprintf(status == 0 ? stdout : stderr,
               "usage: cuda_moe_bench [--model v41,v4] [--tokens 1,16,64,256] [--repeats 20] [--warmup 3]\n"
               "       [--layers 2] [--copy-gb 4] [--device N] [--seed S]\n");
  std::exit(status);
}

void usage_error(const std::string& message) { usage(message); }

int64_t parse_int(const std::string& flag, const std::string& text, int64_t minimum) {
  return deepinfer::bench::parse_integer(flag, text, minimum, usage_error);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::size_t end = comma == std::string::npos ? text.size() : comma;
    if (end > start) out.push_back(text.substr(start, end - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--model") {
      o.models = split_list(value());
      for (const std::string& m : o.models)
        if (m != "v41" && m != "v4") usage("cuda_moe_bench: --model takes v41 and / or v4");
    } else if (flag == "--tokens") {
      o.tokens.clear();
      for (const std::string& t : split_list(value())) o.tokens.push_back(parse_int(flag, t, 1));
    } else if (flag == "--repeats") o.repeats = static_cast<int>(parse_int(flag, value(), 1));
    else if (flag == "--warmup") o.warmup = static_cast<int>(parse_int(flag, value(), 0));
    else if (flag == "--layers") o.layers = static_cast<int>(parse_int(flag, value(), 1));
    else if (flag == "--device") o.device = static_cast<int>(parse_int(flag, value(), 0));
    else if (flag == "--seed") o.seed = static_cast<uint64_t>(parse_int(flag, value(), 0));
    else if (flag == "--copy-gb") o.copy_gb = std::atof(value().c_str());
    else if (flag == "--help" || flag == "-h") usage("", 0);
    else usage("cuda_moe_bench: unknown flag " + flag);
  }
  if (!(o.copy_gb > 0)) usage("cuda_moe_bench: --copy-gb must be positive");
  return o;
}

// The device buffers of one token count: routing, sort, tiles, split activations, h and y.
struct Step {
  int64_t tokens = 0, pairs = 0, tile_bound = 0;
  int tile_pairs = 0;  // as the backend picks them (expert_tile_pairs); DEEPINFER_BENCH_TILE_PAIRS overrides
  kc::ExpertGrid grid = kc::ExpertGrid::kAuto;  // DEEPINFER_BENCH_EXPERT_GRID overrides
  std::size_t scratch_bytes = 0;
  DeviceBuffer x, experts, scratch, sorted_expert, sorted_token, sorted_pair, position_of, tiles, tile_count, x_split,
      h_split, y, sink;
  // The wgmma kernels' (prefill-sized calls): their own tiles, staging, gate / up and y.
  int wgmma_tile_pairs = 0;  // kernels::cuda::expert_wgmma_tile_pairs; 0: not this call
  int64_t wgmma_tile_bound = 0;
  DeviceBuffer wgmma_tiles, staged, gate, up, wgmma_y;
};

bool run_model(const ExpertShape& s, const Options& o, double copy_bytes_per_second) {
  std::printf("\n== %s: %lld experts top-%lld, hidden %lld, inner %lld; %d layer copies of %.2f GB (each twice: row-major and tiled)\n", s.model.c_str(),
              static_cast<long long>(s.experts), static_cast<long long>(s.top_k), static_cast<long long>(s.hidden),
              static_cast<long long>(s.inner), o.layers,
              static_cast<double>(s.experts * (2 * matrix_bytes(s.inner, s.hidden) + matrix_bytes(s.hidden, s.inner))) /
                  1e9);
  std::vector<Layer> layers;
  layers.reserve(static_cast<std::size_t>(o.layers));
  for (int l = 0; l < o.layers; ++l) layers.emplace_back(s, o.seed + 100 * static_cast<uint64_t>(l));
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (weights)");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const kc::Stream ks = stream;
  std::printf("%-7s %-10s %10s %9s %10s %10s %9s %8s\n", "tokens", "variant", "us/call", "experts", "GB read", "GB/s",
              "bound us", "x bound");
  bool ok = true;
  for (const int64_t tokens : o.tokens) {
    Step st;
    st.tokens = tokens;
    st.pairs = tokens * s.top_k;
    st.tile_pairs = kc::expert_tile_pairs(st.pairs, s.experts);
    if (const char* forced = std::getenv("DEEPINFER_BENCH_TILE_PAIRS"); forced != nullptr) st.tile_pairs = std::atoi(forced);
    st.tile_bound = kc::expert_tile_bound(st.pairs, s.experts, st.tile_pairs);
    if (const char* forced = std::getenv("DEEPINFER_BENCH_EXPERT_GRID"); forced != nullptr)
      st.grid = std::string(forced) == "narrow" ? kc::ExpertGrid::kNarrow : kc::ExpertGrid::kWide;
    st.scratch_bytes = kc::moe_sort_scratch_bytes(st.pairs);
    const auto p = static_cast<std::size_t>(st.pairs);
    st.x = DeviceBuffer(static_cast<std::size_t>(tokens * s.hidden) * 4, "x");
    st.experts = DeviceBuffer(p * 4, "experts");
    st.scratch = DeviceBuffer(st.scratch_bytes, "sort scratch");
    st.sorted_expert = DeviceBuffer(p * 4, "sorted_expert");
    st.sorted_token = DeviceBuffer(p * 4, "sorted_token");
    st.sorted_pair = DeviceBuffer(p * 8, "sorted_pair");
    st.position_of = DeviceBuffer(p * 8, "position_of");
    st.tiles = DeviceBuffer(static_cast<std::size_t>(4 * st.tile_bound) * 4, "tiles");
    st.tile_count = DeviceBuffer(4, "tile_count");
    st.x_split = DeviceBuffer(static_cast<std::size_t>(kc::split_words(tokens, s.hidden)) * 4, "x split");
    st.h_split = DeviceBuffer(static_cast<std::size_t>(kc::split_words(st.pairs, s.inner)) * 4, "h split");
    st.y = DeviceBuffer(p * static_cast<std::size_t>(s.hidden) * 4, "y");
    st.sink = DeviceBuffer(4, "sink");
    st.wgmma_tile_pairs = kc::expert_wgmma_tile_pairs(st.pairs, s.experts);
    if (st.wgmma_tile_pairs > 0) {
      st.wgmma_tile_bound = kc::expert_tile_bound(st.pairs, s.experts, st.wgmma_tile_pairs);
      st.wgmma_tiles = DeviceBuffer(static_cast<std::size_t>(4 * st.wgmma_tile_bound) * 4, "wgmma tiles");
      st.staged = DeviceBuffer(static_cast<std::size_t>(kc::expert_wgmma_staged_words(
                                   st.wgmma_tile_bound, std::max(s.hidden, s.inner), st.wgmma_tile_pairs)) * 4,
                               "staged");
      st.gate = DeviceBuffer(p * static_cast<std::size_t>(s.inner) * 4, "gate");
      st.up = DeviceBuffer(p * static_cast<std::size_t>(s.inner) * 4, "up");
      st.wgmma_y = DeviceBuffer(p * static_cast<std::size_t>(s.hidden) * 4, "wgmma y");
    }
    fill_floats_kernel<<<grid_for(tokens * s.hidden), 256, 0, stream>>>(st.x.as<float>(), tokens * s.hidden,
                                                                        o.seed + static_cast<uint64_t>(tokens));
    launched("fill_floats_kernel");
    const std::vector<int32_t> routing = random_routing(s, tokens, o.seed * 31 + static_cast<uint64_t>(tokens));
    check(cudaMemcpy(st.experts.as<void>(), routing.data(), p * 4, cudaMemcpyHostToDevice), "cudaMemcpy (routing)");
    std::vector<bool> touched(static_cast<std::size_t>(s.experts));
    for (const int32_t e : routing) touched[static_cast<std::size_t>(e)] = true;
    const auto distinct = static_cast<int64_t>(std::count(touched.begin(), touched.end(), true));

    const auto sort_and_split = [&]() {
      kc::moe_sort(st.experts.as<int32_t>(), st.pairs, s.top_k, st.scratch.as<void>(), st.scratch_bytes,
                   st.sorted_expert.as<int32_t>(), st.sorted_token.as<int32_t>(), st.sorted_pair.as<int64_t>(),
                   st.position_of.as<int64_t>(), ks);
      kc::expert_tiles(st.sorted_expert.as<int32_t>(), st.pairs, st.tiles.as<int32_t>(), st.tile_count.as<int32_t>(), ks,
                       st.tile_pairs);
      kc::split_rows(st.x.as<float>(), tokens, s.hidden, s.hidden, st.x_split.as<uint32_t>(), ks);
    };
    const auto gate_up = [&](const Layer& layer) {
      kc::expert_gate_up(st.x_split.as<uint32_t>(), st.sorted_token.as<int32_t>(), st.pairs, st.tiles.as<int32_t>(),
                         st.tile_count.as<int32_t>(), st.tile_bound, layer.w1.device(true), layer.w3.device(true),
                         s.inner, s.hidden, kSwigluLimit, nullptr, st.h_split.as<uint32_t>(), ks, kMaxFilledE8m0,
                         st.tile_pairs, st.grid);
    };
    const auto down = [&](const Layer& layer) {
      kc::expert_down(st.h_split.as<uint32_t>(), st.pairs, st.tiles.as<int32_t>(), st.tile_count.as<int32_t>(),
                      st.tile_bound, layer.w2.device(true), s.hidden, s.inner, st.y.as<float>(), ks, kMaxFilledE8m0,
                      st.tile_pairs, st.grid);
    };
    // The wgmma chain: sort, its tiles, gate / up, down (with the SwiGLU as it stages h).
    const auto wgmma_tiles = [&]() {
      kc::moe_sort(st.experts.as<int32_t>(), st.pairs, s.top_k, st.scratch.as<void>(), st.scratch_bytes,
                   st.sorted_expert.as<int32_t>(), st.sorted_token.as<int32_t>(), st.sorted_pair.as<int64_t>(),
                   st.position_of.as<int64_t>(), ks);
      kc::expert_tiles(st.sorted_expert.as<int32_t>(), st.pairs, st.wgmma_tiles.as<int32_t>(),
                       st.tile_count.as<int32_t>(), ks, st.wgmma_tile_pairs);
    };
    const auto wgmma_gate_up = [&](const Layer& layer) {
      kc::expert_gate_up_wgmma(st.x.as<float>(), st.sorted_token.as<int32_t>(), st.wgmma_tiles.as<int32_t>(),
                               st.tile_count.as<int32_t>(), st.wgmma_tile_bound, layer.w1.device(true),
                               layer.w3.device(true), s.inner, s.hidden, st.staged.as<uint32_t>(), st.gate.as<float>(),
                               st.up.as<float>(), ks, kMaxFilledE8m0, st.wgmma_tile_pairs);
    };
    const auto wgmma_down = [&](const Layer& layer) {
      kc::expert_down_wgmma(st.gate.as<float>(), st.up.as<float>(), kSwigluLimit, nullptr,
                            st.wgmma_tiles.as<int32_t>(), st.tile_count.as<int32_t>(), st.wgmma_tile_bound,
                            layer.w2.device(true), s.hidden, s.inner, st.staged.as<uint32_t>(), st.wgmma_y.as<float>(),
                            ks, kMaxFilledE8m0, st.wgmma_tile_pairs);
    };
    const auto read_codes = [&](bool tiled, const Layer& layer) {
      const dim3 grid(static_cast<unsigned>((s.inner + 16 * kReadWarps - 1) / (16 * kReadWarps)),
                      static_cast<unsigned>(std::min<int64_t>(st.tile_bound, 65535)));
      const auto* tiles = reinterpret_cast<const int4*>(st.tiles.as<int32_t>());
      if (tiled)
        read_codes_kernel<true><<<grid, 32 * kReadWarps, 0, stream>>>(tiles, st.tile_count.as<int32_t>(), layer.w1.device(false),
                                                                   layer.w3.device(false), s.inner, s.hidden, st.sink.as<uint32_t>());
      else
        read_codes_kernel<false><<<grid, 32 * kReadWarps, 0, stream>>>(tiles, st.tile_count.as<int32_t>(), layer.w1.device(false),
                                                                    layer.w3.device(false), s.inner, s.hidden, st.sink.as<uint32_t>());
      launched("read_codes_kernel");
    };
    sort_and_split();
    gate_up(layers[0]);
    down(layers[0]);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (first call)");

    const int calls = 4 * o.layers;
    const auto layer_of = [&](int call) -> const Layer& { return layers[static_cast<std::size_t>(call % o.layers)]; };
    struct Variant {
      const char* name;
      double bytes;
      std::function<void(int)> enqueue;
    };
    const double up_bytes = static_cast<double>(distinct * 2 * matrix_bytes(s.inner, s.hidden));
    const double down_bytes = static_cast<double>(distinct * matrix_bytes(s.hidden, s.inner));
    std::vector<Variant> variants = {
        {"experts", up_bytes + down_bytes,
         [&](int call) {
           sort_and_split();
           gate_up(layer_of(call));
           down(layer_of(call));
         }},
        {"gate_up", up_bytes, [&](int call) { gate_up(layer_of(call)); }},
        {"down", down_bytes, [&](int call) { down(layer_of(call)); }},
        {"read rows", up_bytes, [&](int call) { read_codes(false, layer_of(call)); }},
        {"read tiled", up_bytes, [&](int call) { read_codes(true, layer_of(call)); }},
    };
    if (st.wgmma_tile_pairs > 0) {
      wgmma_tiles();
      variants.push_back({"wgmma", up_bytes + down_bytes, [&](int call) {
                            wgmma_tiles();
                            wgmma_gate_up(layer_of(call));
                            wgmma_down(layer_of(call));
                          }});
      variants.push_back({"wg gate_up", up_bytes, [&](int call) { wgmma_gate_up(layer_of(call)); }});
      variants.push_back({"wg down", down_bytes, [&](int call) { wgmma_down(layer_of(call)); }});
    }
    // Matrix products (w1, w3 and w2 of every pair) per second, for the chains.
    const double flops = 6.0 * static_cast<double>(st.pairs * s.inner * s.hidden);
    for (const Variant& v : variants) {
      const double us = time_graph(stream, calls, o.warmup, o.repeats, v.enqueue);
      const double bound_us = v.bytes / copy_bytes_per_second * 1e6;
      std::printf("%-7lld %-10s %10.1f %9lld %10.3f %10.0f %9.1f %7.2fx", static_cast<long long>(tokens), v.name, us,
                  static_cast<long long>(distinct), v.bytes / 1e9, v.bytes / us / 1e3, bound_us, us / bound_us);
      if (std::string(v.name) == "experts" || std::string(v.name) == "wgmma")
        std::printf("  %.1f TFLOP/s%s", flops / us / 1e6,
                    std::string(v.name) == "wgmma" ? (st.wgmma_tile_pairs == 16 ? " (16-pair tiles)" : " (32-pair tiles)") : "");
      std::printf("\n");
    }

    // The check, on layer 0 (the last enqueued call of the "down" graph ran layer (calls - 1) %
    // layers; run layer 0's chain again first).
    sort_and_split();
    gate_up(layers[0]);
    down(layers[0]);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (check)");
    if (st.wgmma_tile_pairs > 0) {  // the wgmma chain must give the same bits
      std::vector<float> want(p * static_cast<std::size_t>(s.hidden)), got(want.size());
      check(cudaMemcpy(want.data(), st.y.as<void>(), want.size() * 4, cudaMemcpyDeviceToHost), "download");
      wgmma_tiles();
      wgmma_gate_up(layers[0]);
      wgmma_down(layers[0]);
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (wgmma check)");
      check(cudaMemcpy(got.data(), st.wgmma_y.as<void>(), got.size() * 4, cudaMemcpyDeviceToHost), "download");
      std::size_t differ = 0;
      for (std::size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &want[i], 4) != 0;
      std::printf("        wgmma bits: %zu of %zu outputs differ from expert_mma's: %s\n", differ, got.size(),
                  differ == 0 ? "ok" : "FAILED");
      ok = ok && differ == 0;
      // The mma chain's sort again, for the check below (the same pairs either way).
      sort_and_split();
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (check)");
    }
    std::vector<int32_t> sorted_expert(p), sorted_token(p);
    check(cudaMemcpy(sorted_expert.data(), st.sorted_expert.as<void>(), p * 4, cudaMemcpyDeviceToHost), "download");
    check(cudaMemcpy(sorted_token.data(), st.sorted_token.as<void>(), p * 4, cudaMemcpyDeviceToHost), "download");
    std::vector<float> x(static_cast<std::size_t>(tokens * s.hidden)), y(p * static_cast<std::size_t>(s.hidden));
    check(cudaMemcpy(x.data(), st.x.as<void>(), x.size() * 4, cudaMemcpyDeviceToHost), "download");
    check(cudaMemcpy(y.data(), st.y.as<void>(), y.size() * 4, cudaMemcpyDeviceToHost), "download");
    double max_diff = 0, max_ref = 0;
    for (int k = 0; k < kCheckedPairs; ++k) {
      const int64_t pos = (st.pairs - 1) * k / std::max(1, kCheckedPairs - 1);
      const int64_t e = sorted_expert[static_cast<std::size_t>(pos)], t = sorted_token[static_cast<std::size_t>(pos)];
      const std::vector<float> w1 = layers[0].w1.host_matrix(e), w3 = layers[0].w3.host_matrix(e),
                               w2 = layers[0].w2.host_matrix(e);
      std::vector<double> h(static_cast<std::size_t>(s.inner));
      for (int64_t i = 0; i < s.inner; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < s.hidden; ++c) {
          const double xv = x[static_cast<std::size_t>(t * s.hidden + c)];
          g += static_cast<double>(w1[static_cast<std::size_t>(i * s.hidden + c)]) * xv;
          u += static_cast<double>(w3[static_cast<std::size_t>(i * s.hidden + c)]) * xv;
        }
        g = std::min(g, static_cast<double>(kSwigluLimit));
        u = std::clamp(u, -static_cast<double>(kSwigluLimit), static_cast<double>(kSwigluLimit));
        h[static_cast<std::size_t>(i)] = silu(g) * u;
      }
      for (int64_t r = 0; r < s.hidden; ++r) {
        double ref = 0;
        for (int64_t i = 0; i < s.inner; ++i)
          ref += static_cast<double>(w2[static_cast<std::size_t>(r * s.inner + i)]) * h[static_cast<std::size_t>(i)];
        const double got = y[static_cast<std::size_t>(pos * s.hidden + r)];
        max_diff = std::max(max_diff, std::isfinite(got) ? std::fabs(got - ref) : INFINITY);
        max_ref = std::max(max_ref, std::fabs(ref));
      }
    }
    const bool passed = max_ref > 0 && max_diff <= kTolerance * max_ref;
    std::printf("        check: %d pairs, max |y - ref| %.3g of max |ref| %.3g: %s\n", kCheckedPairs, max_diff, max_ref,
                passed ? "ok" : "FAILED");
    ok = ok && passed;
  }
  cudaStreamDestroy(stream);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    check(cudaSetDevice(o.device), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
    const auto copy = deepinfer::bench::cuda_copy_bandwidth(o.device, static_cast<int64_t>(o.copy_gb * 1e9), 5);
    std::printf("device: %s (%d SMs); copy bandwidth %.0f GB/s (%s)\n", prop.name, prop.multiProcessorCount,
                copy.bytes_per_second / 1e9, copy.how.c_str());
    bool ok = true;
    for (const std::string& m : o.models) ok = run_model(m == "v41" ? kV41 : kV4, o, copy.bytes_per_second) && ok;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_moe_bench: %s\n", e.what());
    return 1;
  }
}

#include "backend/cuda/device_memory.h"

#include <algorithm>

#include <cuda_runtime.h>

#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"

namespace deepinfer::backend::cuda {
namespace {

void check(cudaError_t status, const char* what, std::size_t bytes) {
  if (status == cudaSuccess) return;
  // A failed allocation is not sticky, but it stays the runtime's "last error" until read, and
  // the next kernel launch's check would report it as its own.
  cudaGetLastError();
  fail("CUDA: ", what, " of ", bytes, " bytes failed: ", cudaGetErrorString(status));
}

}  // namespace

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  check(cudaMalloc(&data_, bytes), "cudaMalloc", bytes);
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

std::size_t matrix_data_bytes(const kernels::WeightMatrix& w) {
  const auto elements = static_cast<std::size_t>(w.rows * w.cols);
  switch (w.encoding) {
    case kernels::WeightEncoding::F32: return elements * 4;
    case kernels::WeightEncoding::BF16: return elements * 2;
    case kernels::WeightEncoding::FP8_E4M3: return elements;
    case kernels::WeightEncoding::FP4_E2M1: return elements / 2;
  }
  return 0;
}

std::size_t matrix_scale_bytes(const kernels::WeightMatrix& w) {
  if (w.scale_encoding == kernels::ScaleEncoding::None || !w.scales) return 0;
  const int64_t scale_cols = (w.cols + w.block_cols - 1) / w.block_cols;
  const int64_t scale_rows =
      w.encoding == kernels::WeightEncoding::FP8_E4M3 ? (w.rows + w.block_rows - 1) / w.block_rows : w.rows;
  const std::size_t width = w.scale_encoding == kernels::ScaleEncoding::E8M0 ? 1 : 4;
  return static_cast<std::size_t>(scale_rows * scale_cols) * width;
}

// The largest E8M0 scale byte of a host matrix (255 when its scales are not E8M0), for
// WeightMatrix::max_e8m0: a pass over bytes the upload copies anyway, 1/16 of an FP4 matrix's.
uint8_t max_e8m0_of(const kernels::WeightMatrix& host) {
  if (host.scale_encoding != kernels::ScaleEncoding::E8M0 || !host.scales) return 255;
  const auto* bytes = static_cast<const uint8_t*>(host.scales);
  const std::size_t count = matrix_scale_bytes(host);
  return count == 0 ? 255 : *std::max_element(bytes, bytes + count);
}

void WeightStore::plan_matrix(const kernels::WeightMatrix& w) {
  planned_bytes_ += matrix_data_bytes(w) + matrix_scale_bytes(w);
}
void WeightStore::plan_floats(std::span<const float> values) { planned_bytes_ += values.size_bytes(); }
void WeightStore::plan_ints(std::span<const int32_t> values) { planned_bytes_ += values.size_bytes(); }

const void* WeightStore::upload(const void* host, std::size_t bytes) {
  if (auto found = copies_.find(host); found != copies_.end()) return found->second;
  DeviceBuffer buffer(bytes);
  if (bytes > 0) check(cudaMemcpy(buffer.data(), host, bytes, cudaMemcpyHostToDevice), "upload", bytes);
  const void* device = buffer.data();
  buffers_.push_back(std::move(buffer));
  copies_.emplace(host, device);
  uploaded_bytes_ += bytes;
  return device;
}

const kernels::WeightMatrix& WeightStore::expert_matrix(const kernels::WeightMatrix& host, bool tiled) {
  tiled = tiled && kernels::cuda::expert_tiles_fit(host);
  const auto layout = tiled ? kernels::WeightLayout::ExpertTiles : kernels::WeightLayout::RowMajor;
  if (auto found = matrices_.find(host.data); found != matrices_.end()) {
    if (found->second.layout != layout) fail("CUDA weight store: an expert matrix asked for in two layouts");
    return found->second;
  }
  if (!tiled) return matrix(host);
  // Row-major into a staging buffer, tiled from there into the copy that stays.
  const std::size_t bytes = matrix_data_bytes(host);
  DeviceBuffer staging(bytes);
  check(cudaMemcpy(staging.data(), host.data, bytes, cudaMemcpyHostToDevice), "upload", bytes);
  DeviceBuffer codes(bytes);
  kernels::cuda::tile_expert_codes(static_cast<const uint8_t*>(staging.data()), static_cast<uint8_t*>(codes.data()),
                                   host.rows, host.cols / 2, nullptr);
  check(cudaDeviceSynchronize(), "tile_expert_codes", bytes);
  kernels::WeightMatrix device = host;
  device.data = codes.data();
  device.layout = layout;
  buffers_.push_back(std::move(codes));
  uploaded_bytes_ += bytes;
  if (host.scales) device.scales = upload(host.scales, matrix_scale_bytes(host));
  device.max_e8m0 = max_e8m0_of(host);
  return matrices_.emplace(host.data, device).first->second;
}

const kernels::WeightMatrix& WeightStore::matrix(const kernels::WeightMatrix& host) {
  if (auto found = matrices_.find(host.data); found != matrices_.end()) return found->second;
  kernels::WeightMatrix device = host;
  device.data = upload(host.data, matrix_data_bytes(host));
  if (host.scales) device.scales = upload(host.scales, matrix_scale_bytes(host));
  device.max_e8m0 = max_e8m0_of(host);
  // The FP8 kernels skip their NaN decode where a matrix has no NaN code (released checkpoints).
  if (host.encoding == kernels::WeightEncoding::FP8_E4M3)
    device.no_nan_codes = !kernels::cuda::has_e4m3_nan(static_cast<const uint8_t*>(device.data),
                                                       host.rows * host.cols, nullptr);
  return matrices_.emplace(host.data, device).first->second;
}

const float* WeightStore::floats(std::span<const float> host) {
  if (host.empty()) return nullptr;
  return static_cast<const float*>(upload(host.data(), host.size_bytes()));
}

const int32_t* WeightStore::ints(std::span<const int32_t> host) {
  if (host.empty()) return nullptr;
  return static_cast<const int32_t*>(upload(host.data(), host.size_bytes()));
}

const kernels::WeightMatrix* WeightStore::descriptor_array(const void* key,
                                                          const std::vector<kernels::WeightMatrix>& host) {
  if (auto found = copies_.find(key); found != copies_.end()) return static_cast<const kernels::WeightMatrix*>(found->second);
  std::vector<kernels::WeightMatrix> device;
  device.reserve(host.size());
  uint8_t max_e8m0 = 0;
  for (const kernels::WeightMatrix& w : host) {
    device.push_back(matrix(w));
    max_e8m0 = std::max(max_e8m0, device.back().max_e8m0);
  }
  array_max_e8m0_[key] = device.empty() ? uint8_t{255} : max_e8m0;
  const std::size_t bytes = device.size() * sizeof(kernels::WeightMatrix);
  DeviceBuffer buffer(bytes);
  if (bytes > 0) check(cudaMemcpy(buffer.data(), device.data(), bytes, cudaMemcpyHostToDevice), "upload", bytes);
  const void* address = buffer.data();
  buffers_.push_back(std::move(buffer));
  copies_.emplace(key, address);
  return static_cast<const kernels::WeightMatrix*>(address);
}

uint8_t WeightStore::descriptor_array_max_e8m0(const void* key) const {
  const auto found = array_max_e8m0_.find(key);
  return found == array_max_e8m0_.end() ? uint8_t{255} : found->second;
}

const kernels::WeightMatrix* WeightStore::find_descriptor_array(const void* key) const {
  const auto found = copies_.find(key);
  return found == copies_.end() ? nullptr : static_cast<const kernels::WeightMatrix*>(found->second);
}

void* Arena::get_bytes(int slot, std::size_t bytes) {
  if (slot >= static_cast<int>(slots_.size())) slots_.resize(static_cast<std::size_t>(slot) + 1);
  DeviceBuffer& buffer = slots_[static_cast<std::size_t>(slot)];
  if (buffer.bytes() < bytes) {
    buffer = DeviceBuffer();  // free first: the old contents are not kept
    buffer = DeviceBuffer(bytes + bytes / 4);
    ++generation_;
  }
  return buffer.data();
}

std::size_t Arena::bytes() const {
  std::size_t total = 0;
  for (const DeviceBuffer& buffer : slots_) total += buffer.bytes();
  return total;
}

}  // namespace deepinfer::backend::cuda

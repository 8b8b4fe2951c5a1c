#include "model/paged_rows.h"

#include <cstring>

#include "core/error.h"

namespace deepinfer::model {

namespace {

class HostCacheMemory final : public CacheMemory {
 public:
  std::shared_ptr<std::byte> allocate(int64_t bytes, bool zeroed) const override {
    if (bytes < 0) fail("cache memory: ", bytes, " bytes asked for");
    const auto size = static_cast<std::size_t>(bytes);
    // Not zeroed: the pages of a large pool are touched only when a block is first written.
    return std::shared_ptr<std::byte>(zeroed ? new std::byte[size]() : new std::byte[size],
                                      std::default_delete<std::byte[]>());
  }
  void copy(std::byte* to, const std::byte* from, int64_t bytes) const override {
    std::memcpy(to, from, static_cast<std::size_t>(bytes));
  }
  void write(std::byte* to, const std::byte* host, int64_t bytes) const override { copy(to, host, bytes); }
  void read(std::byte* host, const std::byte* from, int64_t bytes) const override { copy(host, from, bytes); }
  std::string name() const override { return "host"; }
};

}  // namespace

const CacheMemory& host_cache_memory() {
  static const HostCacheMemory memory;
  return memory;
}

void CachePages::cover(int64_t end_position) {
  if (block_bytes == 0) return;  // no layer owns paged rows: nothing is ever read or written
  const int64_t needed = blocks_for_tokens(end_position, block_tokens);
  for (int64_t k = 0; k < needed; ++k) (void)block(k);
}

std::byte* CachePages::block(int64_t index) {
  if (index < static_cast<int64_t>(blocks.size()) && blocks[index] != nullptr) return blocks[index];
  if (external)
    fail("cache block ", index, " (positions ", index * block_tokens, "..", (index + 1) * block_tokens - 1,
         ") is missing from the sequence's block table (", blocks.size(), " entries): the caller must map it before the forward");
  if (index >= static_cast<int64_t>(blocks.size())) blocks.resize(static_cast<std::size_t>(index + 1), nullptr);
  owned.push_back(memory->allocate(block_bytes));  // zeroed
  blocks[index] = owned.back().get();
  return blocks[index];
}

PagedRows::PagedRows(CacheFormat format, int64_t width, int64_t ratio, int64_t region_offset, int64_t slots)
    : format_(format), width_(width), quantized_(quantizes(format, width)), ratio_(ratio),
      region_offset_(region_offset), slots_(slots) {
  if (quantized_) {
    code_bytes_ = code_bytes(format, width);
    scale_bytes_ = width / cache_block(format);
  } else {
    code_bytes_ = width * static_cast<int64_t>(sizeof(float));
  }
}

std::byte* PagedRows::row_address(int64_t w) const {
  if (pages_ == nullptr || ratio_ <= 0) fail("paged cache rows used before they were bound to a block table");
  const int64_t block_tokens = pages_->block_tokens;
  const int64_t k = ((w + 1) * ratio_ - 1) / block_tokens;  // the block where entry w's window closes
  const int64_t slot = w - k * block_tokens / ratio_;
  if (slot < 0 || slot >= slots_) fail("cache entry ", w, " maps to slot ", slot, " of ", slots_, " in block ", k);
  const int64_t offset = region_offset_ + slot * row_bytes();
  if (offset + row_bytes() > pages_->block_bytes)
    fail("cache entry ", w, " at byte ", offset, " lies outside a block of ", pages_->block_bytes, " bytes");
  return pages_->block(k) + offset;
}

void PagedRows::write(int64_t w, const float* row) {
  if (w != rows_) fail("cache entry ", w, " written after ", rows_, " entries: entries only grow");
  std::byte* at = row_address(w);
  if (!quantized_) {
    std::memcpy(at, row, static_cast<std::size_t>(code_bytes_));
  } else {
    auto* codes = reinterpret_cast<uint8_t*>(at);
    quantize_vector(format_, row, width_, codes, codes + code_bytes_);
  }
  ++rows_;
}

void PagedRows::read(int64_t w, float* out) const {
  if (w < 0 || w >= rows_) fail("cache entry ", w, " outside ", rows_, " entries");
  const std::byte* at = row_address(w);
  if (!quantized_) {
    std::memcpy(out, at, static_cast<std::size_t>(code_bytes_));
    return;
  }
  const auto* codes = reinterpret_cast<const uint8_t*>(at);
  dequantize_vector(format_, codes, codes + code_bytes_, width_, out);
}

void PagedRows::read_rows(int64_t first, int64_t count, float* out) const {
  for (int64_t i = 0; i < count; ++i) read(first + i, out + i * width_);
}

}  // namespace deepinfer::model

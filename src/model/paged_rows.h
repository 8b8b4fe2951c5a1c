#pragma once
// A sequence's compressed entries and index keys, kept in fixed-size cache blocks instead of
// growing vectors (docs/ENGINE.md, "Cache and prefix cache"). Block k covers positions
// [k * B, (k + 1) * B) and owns every entry whose window closes inside it: entry w of a layer of
// ratio r lives in block k = ((w + 1) * r - 1) / B, slot w - floor(k * B / r), at
// blocks[k] + region_offset + slot * row_bytes (the layer's region, cache_layout.h). Once its
// window has closed an entry never changes, so a block is shareable by every sequence with the
// same first (k + 1) * B tokens.
//
// Rows are stored as QuantizedRows stores them (fake_quant.h codes then scale bytes, or f32 when
// the format is F32 or the width does not block), so reading gives back the same numbers.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/fake_quant.h"

namespace deepinfer::model {

// Where cache blocks live: the memory a backend's passes read (host for the CPU, device for CUDA;
// model/backend.h Backend::cache_memory). Blocks are opaque bytes to everything above the backend:
// the engine's pool, the prefix cache and forks move them through this interface only.
class CacheMemory {
 public:
  virtual ~CacheMemory() = default;
  // `bytes` bytes (zeroed when `zeroed`), freed when the last copy of the pointer goes. Throws
  // deepinfer::Error with the sizes when the memory is not there.
  virtual std::shared_ptr<std::byte> allocate(int64_t bytes, bool zeroed = true) const = 0;
  // Copies `bytes` between two places in this memory (a fork's copy-on-write).
  virtual void copy(std::byte* to, const std::byte* from, int64_t bytes) const = 0;
  // Host bytes into this memory and back (snapshots kept in pool blocks).
  virtual void write(std::byte* to, const std::byte* host, int64_t bytes) const = 0;
  virtual void read(std::byte* host, const std::byte* from, int64_t bytes) const = 0;
  // "host" or the device's name, for messages.
  virtual std::string name() const = 0;
};

// Host memory (the CPU backend's).
const CacheMemory& host_cache_memory();

// A sequence's block table.
struct CachePages {
  int64_t block_tokens = 0;
  int64_t block_bytes = 0;          // one block's payload (CacheLayout::block_bytes)
  std::vector<std::byte*> blocks;   // block k covers positions [k * B, (k + 1) * B)
  std::vector<std::shared_ptr<std::byte>> owned;  // self-owned pages: the blocks themselves
  const CacheMemory* memory = &host_cache_memory();  // where self-owned pages are allocated
  bool external = false;  // the caller (the engine's BlockPool) owns the blocks and fills the table

  // Makes sure blocks 0 .. ceil(end_position / B) - 1 are present: self-owned pages allocate the
  // missing ones (zeroed); external pages throw deepinfer::Error naming the first missing block.
  void cover(int64_t end_position);
  // Block `index`: self-owned pages allocate it when absent; external pages throw.
  std::byte* block(int64_t index);
};

// ceil(tokens / block_tokens): the blocks a sequence of `tokens` positions needs.
inline int64_t blocks_for_tokens(int64_t tokens, int64_t block_tokens) {
  return (tokens + block_tokens - 1) / block_tokens;
}

class PagedRows {
 public:
  PagedRows() = default;
  // One layer's region: rows of `width` values in `format`, one per `ratio` tokens, at
  // `region_offset` inside each block, `slots` rows per block.
  PagedRows(CacheFormat format, int64_t width, int64_t ratio, int64_t region_offset, int64_t slots);

  // The table the rows live in; SequenceState rebinds it whenever the sequence moves.
  void bind(CachePages* pages) { pages_ = pages; }

  int64_t width() const { return width_; }
  int64_t size() const { return rows_; }
  int64_t ratio() const { return ratio_; }
  CacheFormat format() const { return format_; }
  int64_t region_offset() const { return region_offset_; }
  int64_t slots() const { return slots_; }
  // Bytes of one stored row (codes + scales, or 4 * width).
  int64_t row_bytes() const { return code_bytes_ + scale_bytes_; }

  // Stores row `w` (entries only grow: w must be size()).
  void write(int64_t w, const float* row);
  // Decodes row `w` into out[0, width).
  void read(int64_t w, float* out) const;
  // Decodes rows [first, first + count) into out ([count, width]).
  void read_rows(int64_t first, int64_t count, float* out) const;
  // The number of rows already held by the blocks (a restored snapshot's count).
  void set_size(int64_t rows) { rows_ = rows; }

 private:
  std::byte* row_address(int64_t w) const;

  CacheFormat format_ = CacheFormat::F32;
  int64_t width_ = 0;
  bool quantized_ = false;
  int64_t code_bytes_ = 0;
  int64_t scale_bytes_ = 0;
  int64_t ratio_ = 0;
  int64_t region_offset_ = 0;
  int64_t slots_ = 0;
  int64_t rows_ = 0;
  CachePages* pages_ = nullptr;
};

}  // namespace deepinfer::model

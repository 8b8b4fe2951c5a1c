// Model::save_snapshot / restore_snapshot: a sequence's fixed state as bytes (docs/ENGINE.md,
// "What a resume at a block boundary needs"). Everything is copied as stored (window rows as
// their codes and scales, compressor rows as f32), so a restored sequence continues bit for bit.
//
// Layout, native byte order (a snapshot lives in one process's cache): magic, the model and
// layout fingerprint, the length, per layer its state, the Engram look-back, then an FNV-1a 64
// checksum of everything before it. Variable-length arrays are a u64 count, then the elements.
#include <algorithm>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

constexpr std::string_view kMagic = "DISNAP01";

uint64_t fnv1a(std::span<const std::byte> bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (std::byte b : bytes) hash = (hash ^ static_cast<uint64_t>(b)) * 1099511628211ull;
  return hash;
}

class Writer {
 public:
  void raw(const void* data, std::size_t size) {
    if (size == 0) return;  // an empty vector's data() may be null
    const auto* bytes = static_cast<const std::byte*>(data);
    out_.insert(out_.end(), bytes, bytes + size);
  }
  void integer(int64_t value) { raw(&value, sizeof value); }
  template <class T>
  void array(std::span<const T> values) {
    integer(static_cast<int64_t>(values.size()));
    raw(values.data(), values.size() * sizeof(T));
  }
  std::vector<std::byte>& bytes() { return out_; }

 private:
  std::vector<std::byte> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  void raw(void* out, std::size_t size) {
    if (size > bytes_.size() - at_) fail("snapshot: truncated (", bytes_.size(), " bytes)");
    if (size == 0) return;  // an empty vector's data() may be null
    std::memcpy(out, bytes_.data() + at_, size);
    at_ += size;
  }
  int64_t integer() {
    int64_t value;
    raw(&value, sizeof value);
    return value;
  }
  template <class T>
  std::vector<T> array() {
    const int64_t count = integer();
    if (count < 0 || static_cast<uint64_t>(count) > (bytes_.size() - at_) / sizeof(T))
      fail("snapshot: an array of ", count, " elements runs past the end");
    std::vector<T> values(static_cast<std::size_t>(count));
    raw(values.data(), values.size() * sizeof(T));
    return values;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
  std::size_t at_ = 0;
};

// What a snapshot must agree on with the sequence it is restored into.
std::vector<int64_t> fingerprint(const ModelConfig& config, const CacheLayout& layout) {
  std::vector<int64_t> out{static_cast<int64_t>(config.family), config.num_layers, config.vocab_size,
                           config.hidden_size, config.head_dim, config.index_head_dim, config.sliding_window,
                           layout.block_tokens, layout.block_bytes, layout.engram_lookback_bytes};
  for (const LayerCacheBytes& layer : layout.layers)
    out.insert(out.end(), {layer.ratio, layer.window_row_bytes, layer.entry_bytes, layer.index_key_bytes,
                           layer.compressor_row_bytes});
  return out;
}

void save_compressor(Writer& out, const CompressorState& state) {
  out.integer(state.entries.size());
  out.array<float>(state.open_kv);
  out.array<float>(state.open_gate);
  out.array<float>(state.previous_kv);
  out.array<float>(state.previous_gate);
}

// `weights`: the compressor the state belongs to (null: the layer has none, so the state is empty).
void restore_compressor(Reader& in, const CompressorWeights* weights, int64_t length, CompressorState& state,
                        int64_t layer) {
  const int64_t entries = in.integer();
  state.open_kv = in.array<float>();
  state.open_gate = in.array<float>();
  state.previous_kv = in.array<float>();
  state.previous_gate = in.array<float>();
  if (!weights) {
    if (entries != 0 || !state.open_kv.empty() || !state.open_gate.empty() || !state.previous_kv.empty() ||
        !state.previous_gate.empty())
      fail("snapshot: layer ", layer, " has no compressor but the snapshot holds compressor state");
    return;
  }
  const int64_t width = weights->width();
  const auto rows = [&](const std::vector<float>& v) { return static_cast<int64_t>(v.size()) / width; };
  const int64_t open = length - entries * weights->ratio;
  const int64_t previous = weights->overlap && entries > 0 ? weights->ratio : 0;
  if (entries < 0 || open < 0 || open >= weights->ratio || static_cast<int64_t>(state.open_kv.size()) != open * width ||
      state.open_gate.size() != state.open_kv.size() || rows(state.previous_kv) != previous ||
      static_cast<int64_t>(state.previous_kv.size()) % width != 0 || state.previous_gate.size() != state.previous_kv.size())
    fail("snapshot: layer ", layer, "'s compressor state does not fit ", entries, " entries at length ", length);
  state.entries.set_size(entries);
}

}  // namespace

std::vector<std::byte> Model::save_snapshot(const SequenceState& sequence) const {
  PendingSnapshot pending = begin_snapshot(sequence);
  return finish_snapshot(pending);
}

Model::PendingSnapshot Model::begin_snapshot(const SequenceState& sequence) const {
  if (static_cast<int64_t>(sequence.layers.size()) != config_.num_layers)
    fail("save_snapshot: the sequence state was not made by this model");
  PendingSnapshot pending;
  pending.length = sequence.length;
  pending.block_tokens = sequence.pages.block_tokens;
  pending.layers = sequence.layers;
  if (sequence.engram) pending.engram_lookback.assign(sequence.engram->lookback().begin(), sequence.engram->lookback().end());
  // A backend that holds layers' state in its own memory freezes it where the issued work leaves it.
  if (std::any_of(pending.layers.begin(), pending.layers.end(), [](const AttentionState& l) { return l.backend; }))
    backend_->freeze_layers(pending.layers);
  return pending;
}

std::vector<std::byte> Model::finish_snapshot(PendingSnapshot& pending) const {
  if (std::any_of(pending.layers.begin(), pending.layers.end(), [](const AttentionState& l) { return l.backend; }))
    backend_->download_layers(pending.layers);
  Writer out;
  out.raw(kMagic.data(), kMagic.size());
  out.array<int64_t>(fingerprint(config_, cache_layout(pending.block_tokens)));
  out.integer(pending.length);
  for (const AttentionState& layer : pending.layers) {
    out.integer(layer.window_first);
    out.integer(layer.window.size());
    out.array<uint8_t>(layer.window.stored());
    save_compressor(out, layer.compressor);
    save_compressor(out, layer.indexer.compressor);
    const CompressedGroupState& group = layer.group;
    out.integer(group.compressor.entry_count);
    out.array<float>(group.compressor.open_kv);
    out.array<float>(group.compressor.open_gate);
    out.integer(group.entries.size());
    out.integer(group.index_keys.size());
  }
  out.array<int64_t>(pending.engram_lookback);
  const uint64_t checksum = fnv1a(out.bytes());
  out.raw(&checksum, sizeof checksum);
  return std::move(out.bytes());
}

void Model::restore_snapshot(SequenceState& sequence, std::span<const std::byte> snapshot) const {
  if (static_cast<int64_t>(sequence.layers.size()) != config_.num_layers)
    fail("restore_snapshot: the sequence state was not made by this model");
  uint64_t checksum = 0;
  if (snapshot.size() < kMagic.size() + sizeof checksum ||
      std::memcmp(snapshot.data(), kMagic.data(), kMagic.size()) != 0)
    fail("restore_snapshot: ", snapshot.size(), " bytes are not a deepinfer sequence snapshot");
  const std::span<const std::byte> body = snapshot.first(snapshot.size() - sizeof checksum);
  std::memcpy(&checksum, snapshot.data() + body.size(), sizeof checksum);
  if (fnv1a(body) != checksum) fail("restore_snapshot: checksum mismatch (the snapshot is truncated or corrupt)");

  Reader in(body.subspan(kMagic.size()));
  if (in.array<int64_t>() != fingerprint(config_, cache_layout(sequence.pages.block_tokens)))
    fail("restore_snapshot: the snapshot was taken on another model or cache block size (this sequence has blocks of ",
         sequence.pages.block_tokens, " tokens)");
  const int64_t length = in.integer();
  if (length < 0) fail("restore_snapshot: negative length ", length);
  const CachePages& pages = sequence.pages;
  if (pages.block_bytes > 0)
    for (int64_t k = 0; k < blocks_for(length, pages.block_tokens); ++k)
      if (k >= static_cast<int64_t>(pages.blocks.size()) || pages.blocks[k] == nullptr)
        fail("restore_snapshot: cache block ", k, " of the snapshot's ", length,
             " tokens is missing from the sequence's block table");

  std::vector<AttentionState> layers = sequence.layers;  // committed only once all of it is valid
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const AttentionWeights& weights = layers_[l].attention;
    AttentionState& state = layers[l];
    state.window_first = in.integer();
    const int64_t rows = in.integer();
    const std::vector<uint8_t> window = in.array<uint8_t>();
    if (state.window_first < 0 || rows < 0 || rows > weights.window - 1 || state.window_first + rows != length)
      fail("restore_snapshot: layer ", l, "'s window (", rows, " rows from ", state.window_first,
           ") does not end at length ", length);
    state.window.restore_stored(rows, window);
    restore_compressor(in, weights.compressor ? &*weights.compressor : nullptr, length, state.compressor, l);
    restore_compressor(in, weights.indexer ? &weights.indexer->compressor : nullptr, length, state.indexer.compressor, l);
    CompressedGroupState& group = state.group;
    group.compressor.entry_count = in.integer();
    group.compressor.open_kv = in.array<float>();
    group.compressor.open_gate = in.array<float>();
    const int64_t entries = in.integer();
    const int64_t keys = in.integer();
    const LatentCompressorWeights* latent = weights.latent_compressor ? &*weights.latent_compressor : nullptr;
    const int64_t count = group.compressor.entry_count;
    const bool fits = latent ? count >= 0 && entries == count && keys == count &&
                                   length - count * latent->ratio >= 0 && length - count * latent->ratio < latent->ratio &&
                                   static_cast<int64_t>(group.compressor.open_kv.size()) ==
                                       (length - count * latent->ratio) * latent->head_dim &&
                                   group.compressor.open_gate.size() == group.compressor.open_kv.size()
                             : count == 0 && entries == 0 && keys == 0 && group.compressor.open_kv.empty() &&
                                   group.compressor.open_gate.empty();
    if (!fits) fail("restore_snapshot: layer ", l, "'s kv-source state does not fit length ", length);
    group.entries.set_size(entries);
    group.index_keys.set_size(keys);
  }
  const std::vector<int64_t> lookback = in.array<int64_t>();
  std::optional<EngramHashState> engram;
  if (engram_) engram.emplace(engram_->hasher().state_from(lookback));
  else if (!lookback.empty()) fail("restore_snapshot: an Engram look-back for a model without Engram");
  if (!in.done()) fail("restore_snapshot: trailing bytes after the sequence state");

  sequence.length = length;
  sequence.layers = std::move(layers);
  sequence.engram = std::move(engram);
  sequence.bind_pages();
  backend_->upload_layers(sequence);
}

// Framing (save_snapshot): magic, fingerprint (10 + 5 per layer values), length, look-back count
// and checksum, 8 bytes each, and 18 counts of 8 bytes per layer.
int64_t Model::max_snapshot_bytes(int64_t block_tokens) const {
  const CacheLayout layout = cache_layout(block_tokens);
  const auto layers = static_cast<int64_t>(layout.layers.size());
  return layout.sequence_state_bytes() + 8 * (15 + 5 * layers) + 18 * 8 * layers;
}

}  // namespace deepinfer::model

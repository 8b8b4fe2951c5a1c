#include "io/tokenizer/bpe_model.h"

#include <algorithm>

#include "core/error.h"
#include "io/tokenizer/byte_level.h"
#include "io/tokenizer/utf8.h"

namespace deepinfer::tokenizer {
namespace {

// Ids are stored densely; a sparse id far beyond the vocabulary's size is a broken file (and would
// make us allocate gigabytes), so it is refused.
constexpr std::size_t kSlackIds = 1 << 20;

struct QueuedMerge {
  uint32_t rank;
  int32_t position;
  int32_t merged_id;
};
// Min-heap order: lowest rank first, then leftmost position (the library's order).
struct PopsLater {
  bool operator()(const QueuedMerge& a, const QueuedMerge& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.position > b.position;
  }
};

}  // namespace

BpeModel::BpeModel(BpeConfig config, std::string_view origin) {
  vocab_.reserve(config.vocab.size());
  int32_t max_id = -1;
  for (auto& [token, id] : config.vocab) {
    if (id < 0 || static_cast<std::size_t>(id) > config.vocab.size() + kSlackIds) {
      fail(origin, ": model.vocab: id ", id, " of token \"", token, "\" is out of range");
    }
    max_id = std::max(max_id, id);
  }
  id_to_token_.resize(static_cast<std::size_t>(max_id + 1));
  id_known_.assign(id_to_token_.size(), false);
  for (auto& [token, id] : config.vocab) {
    id_to_token_[id] = token;
    id_known_[id] = true;
    vocab_.insert_or_assign(token, id);
  }

  const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::instance();
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = vocab_.find(alphabet.spelling(static_cast<unsigned char>(b))).value_or(-1);
  }

  merges_.reserve(config.merges.size());
  std::string merged;
  for (std::size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [left, right] = config.merges[rank];
    const auto find_part = [&](const std::string& part) {
      const auto id = vocab_.find(part);
      if (!id) fail(origin, ": model.merges[", rank, "]: token \"", part, "\" is not in the vocabulary");
      return *id;
    };
    const int32_t left_id = find_part(left);
    const int32_t right_id = find_part(right);
    merged.assign(left).append(right);
    const int32_t merged_id = find_part(merged);
    merges_.insert(left_id, right_id, Merge{static_cast<uint32_t>(rank), merged_id});
  }

  if (config.unk_token) {
    unk_id_ = vocab_.find(*config.unk_token);
    if (!unk_id_) fail(origin, ": model.unk_token \"", *config.unk_token, "\" is not in the vocabulary");
  }
  fuse_unk_ = config.fuse_unk;
  ignore_merges_ = config.ignore_merges;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  return vocab_.find(token);
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size() || !id_known_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::initial_symbols(std::string_view word, bool byte_level, std::vector<Symbol>& symbols) const {
  symbols.clear();
  const auto add = [&](int32_t id, uint32_t length) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back(Symbol{id, index - 1, -1, length});
  };
  // Unknown pieces become the unk token, fused into one when fuse_unk is set; without an unk
  // token they are dropped (the library's behaviour).
  std::optional<Symbol> pending_unk;
  const auto add_known = [&](int32_t id, uint32_t length) {
    if (pending_unk) {
      add(pending_unk->id, pending_unk->byte_length);
      pending_unk.reset();
    }
    add(id, length);
  };
  const auto add_unknown = [&](uint32_t length) {
    if (!unk_id_) return;
    if (pending_unk && fuse_unk_) {
      pending_unk->byte_length += length;
      return;
    }
    if (pending_unk) add(pending_unk->id, pending_unk->byte_length);
    pending_unk = Symbol{*unk_id_, -1, -1, length};
  };

  if (byte_level) {
    for (const char c : word) {
      const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
      // A byte-level character spans 1 or 2 bytes of UTF-8; lengths only mark merged-away
      // symbols, so the raw byte count serves.
      if (id >= 0) add_known(id, 1); else add_unknown(1);
    }
  } else {
    std::size_t pos = 0;
    while (pos < word.size()) {
      const std::size_t start = pos;
      pos += utf8_length(static_cast<unsigned char>(word[pos]));
      const auto length = static_cast<uint32_t>(pos - start);
      const auto id = vocab_.find(word.substr(start, length));
      if (id) add_known(*id, length); else add_unknown(length);
    }
  }
  if (pending_unk) add(pending_unk->id, pending_unk->byte_length);
}

void BpeModel::merge_all(std::vector<Symbol>& symbols) const {
  thread_local std::vector<QueuedMerge> queue;
  queue.clear();
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* merge = merges_.find(symbols[i].id, symbols[i + 1].id)) {
      queue.push_back({merge->rank, static_cast<int32_t>(i), merge->merged_id});
    }
  }
  std::make_heap(queue.begin(), queue.end(), PopsLater{});
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), PopsLater{});
    const QueuedMerge top = queue.back();
    queue.pop_back();
    Symbol& current = symbols[top.position];
    if (current.byte_length == 0 || current.next == -1) continue;  // merged away / last symbol
    const int32_t right_index = current.next;
    const Symbol right = symbols[right_index];
    // The entry is stale when the pair at this position has changed since it was queued.
    const Merge* still = merges_.find(current.id, right.id);
    if (!still || still->merged_id != top.merged_id) continue;

    current.id = top.merged_id;
    current.byte_length += right.byte_length;
    current.next = right.next;
    symbols[right_index].byte_length = 0;
    if (right.next >= 0) symbols[right.next].prev = top.position;

    if (current.prev >= 0) {
      if (const Merge* merge = merges_.find(symbols[current.prev].id, current.id)) {
        queue.push_back({merge->rank, current.prev, merge->merged_id});
        std::push_heap(queue.begin(), queue.end(), PopsLater{});
      }
    }
    if (current.next >= 0) {
      if (const Merge* merge = merges_.find(current.id, symbols[current.next].id)) {
        queue.push_back({merge->rank, top.position, merge->merged_id});
        std::push_heap(queue.begin(), queue.end(), PopsLater{});
      }
    }
  }
}

void BpeModel::encode_word(std::string_view word, bool byte_level, WordCache* cache,
                           std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    thread_local std::string spelled;
    std::string_view whole = word;
    if (byte_level) {
      spelled.clear();
      ByteLevelAlphabet::instance().encode(word, spelled);
      whole = spelled;
    }
    if (const auto id = vocab_.find(whole)) {
      ids.push_back(*id);
      return;
    }
  }
  if (cache) {
    if (const std::vector<int32_t>* hit = cache->find(word)) {
      ids.insert(ids.end(), hit->begin(), hit->end());
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  initial_symbols(word, byte_level, symbols);
  merge_all(symbols);
  const std::size_t first = ids.size();
  for (const Symbol& symbol : symbols) {
    if (symbol.byte_length != 0) ids.push_back(symbol.id);
  }
  if (cache) cache->insert(word, std::span<const int32_t>(ids).subspan(first));
}

}  // namespace deepinfer::tokenizer

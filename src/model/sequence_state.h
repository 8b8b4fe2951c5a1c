#pragma once
// Everything one sequence carries between forward calls (v4_arch.md §4.1), per decoder layer:
// the sliding window's K = V rows, and
//  * V4: the compressor's open window (and, for CSA, the previous window's rows that the next
//    entry overlaps), the compressed entries, and on CSA layers the indexer's own state;
//  * V4.1: on kv sources only, the group's unfinished compress group, its FP4 compressed entries
//    and FP4 index keys (read by the group's other layers);
// plus, for V4.1 models with Engram, the n-gram look-back.
//
// The compressed entries and index keys (the state that grows with the context) live in the
// block table `pages` (paged_rows.h); the rest is bounded and is what a snapshot holds
// (Model::save_snapshot).
#include <cstdint>
#include <optional>
#include <vector>

#include "model/attention.h"
#include "model/engram.h"
#include "model/paged_rows.h"

namespace deepinfer::model {

struct SequenceState {
  int64_t length = 0;  // tokens consumed so far = position of the next token
  std::vector<AttentionState> layers;
  std::optional<EngramHashState> engram;  // V4.1 models with Engram layers
  CachePages pages;

  SequenceState() = default;
  // Moving keeps the layers' paged rows pointed at this object's `pages`.
  SequenceState(SequenceState&& other) noexcept;
  SequenceState& operator=(SequenceState&& other) noexcept;
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  // Points every layer's paged rows at `pages`.
  void bind_pages();
};

}  // namespace deepinfer::model

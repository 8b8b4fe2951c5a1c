#pragma once
// Everything one sequence carries between forward calls (v4_arch.md §4.1), per decoder layer:
// the sliding window's K = V rows, and
//  * V4: the compressor's open window (and, for CSA, the previous window's rows that the next
//    entry overlaps), the compressed entries, and on CSA layers the indexer's own state;
//  * V4.1: on kv sources only, the group's unfinished compress group, its FP4 compressed entries
//    and FP4 index keys (read by the group's other layers);
// plus, for V4.1 models with Engram, the n-gram look-back.
#include <cstdint>
#include <optional>
#include <vector>

#include "model/attention.h"
#include "model/engram.h"

namespace deepinfer::model {

struct SequenceState {
  int64_t length = 0;  // tokens consumed so far = position of the next token
  std::vector<AttentionState> layers;
  std::optional<EngramHashState> engram;  // V4.1 models with Engram layers
};

}  // namespace deepinfer::model

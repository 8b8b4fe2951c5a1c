#pragma once
// Everything one sequence carries between forward calls (v4_arch.md §4.1), per decoder layer:
// the sliding window's K = V rows, the compressor's open window (and, for CSA, the previous
// window's rows that the next entry overlaps), the compressed entries, and on CSA layers the
// indexer's own compressor state and index keys.
#include <cstdint>
#include <vector>

#include "model/attention.h"

namespace deepinfer::model {

struct SequenceState {
  int64_t length = 0;  // tokens consumed so far = position of the next token
  std::vector<AttentionState> layers;
};

}  // namespace deepinfer::model

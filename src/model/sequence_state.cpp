#include "model/sequence_state.h"

namespace deepinfer::model {

SequenceState::SequenceState(SequenceState&& other) noexcept
    : length(other.length),
      layers(std::move(other.layers)),
      engram(std::move(other.engram)),
      pages(std::move(other.pages)) {
  bind_pages();
}

SequenceState& SequenceState::operator=(SequenceState&& other) noexcept {
  length = other.length;
  layers = std::move(other.layers);
  engram = std::move(other.engram);
  pages = std::move(other.pages);
  bind_pages();
  return *this;
}

void SequenceState::bind_pages() {
  for (AttentionState& layer : layers) {
    layer.compressor.entries.bind(&pages);
    layer.indexer.compressor.entries.bind(&pages);
    layer.group.entries.bind(&pages);
    layer.group.index_keys.bind(&pages);
  }
}

}  // namespace deepinfer::model

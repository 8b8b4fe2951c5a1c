#pragma once
// The host side of DSpark's draft head (backend.h DraftHeadWeights): one position's Markov-
// corrected logits and raw confidence. Drafter::draft runs it when a request picks its drafts
// itself (sampled drafts need the whole corrected row); ForwardPass::greedy_draft_head's default
// runs it for greedy drafts on backends without a device version.
#include <cstdint>
#include <span>

#include "model/backend.h"

namespace deepinfer::model {

// embedding <- markov_w1[previous] ([r]); logits <- base + markov_w2 . embedding ([V]).
void markov_logits(const DraftHeadWeights& weights, int32_t previous, std::span<const float> base,
                   std::span<float> embedding, std::span<float> logits);

// confidence . [collapsed ; embedding] (collapsed [D], embedding [r]).
float raw_confidence(const DraftHeadWeights& weights, std::span<const float> collapsed, std::span<const float> embedding);

// The greedy token of a corrected row: its argmax, ties to the lowest id, NaN below everything.
int32_t greedy_draft_token(std::span<const float> logits);

}  // namespace deepinfer::model

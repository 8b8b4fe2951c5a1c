#pragma once
// The CUDA backend's activation arena slots (device_memory.h Arena): one buffer each, sized by
// CudaBackend::reserve for the largest step and reused by every call. What the host writes for a
// pass (ids, positions, addresses, entry lists) is not here: it goes through the staging area
// (staging.h). The sampler's slots are in an arena of their own (CudaBackend::sampler_arena).
namespace deepinfer::backend::cuda {

enum Slot : int {
  kStreams,
  kSublayerIn,
  kSublayerOut,
  kFlat,
  kMixLogits,
  kPre,
  kPost,
  kComb,
  kCarriedPre,
  kRouterLogits,
  kExperts,
  kRouteWeights,
  kPairToken,
  kPairIdentity,
  kGate,
  kUp,
  kSharedGate,
  kSharedUp,
  kSharedOut,
  kHeadStreams,
  kHeadPre,
  kHeadHidden,
  kHeadFlat,
  kHeadMix,
  kLogits,
  kQResidual,
  kQuery,
  kKv,
  kAttended,
  kLowRank,
  kSortScratch,
  kSortedExpert,
  kSortedPair,
  kPositionOf,
  kSortedOut,
  kSortedScale,
  kExpertTiles,
  kExpertTileCount,
  kExpertStaged,  // the wgmma experts' tiles of split activations (prefill-sized calls)
  kSplitInput,
  kMmaPartials,
  kLowRankByGroup,
  kTokenIds,  // the pass's token ids on the device, staged or taken from the previous pass's draws
  kLinearSplit,
  // The same three for the linears of a pass's side branch (CudaForwardPass::SideBranch), which
  // run at the same time as the main stream's.
  kSideSplitInput,
  kSideMmaPartials,
  kSideLinearSplit,
  // And for V4.1's mix lane (CudaForwardPass::enter_site: a site's projection beside its sublayer).
  kMixSplitInput,
  kMixMmaPartials,
  kMixLinearSplit,
  // Attention's middle (device_attention.cpp).
  kCallRows,
  kCompressorKv,
  kCompressorGate,
  kPooled,
  kIndexQuery,
  kIndexWeights,
  kScores,
  kPicks,
  kPickCount,
  kCandidateMask,
  kLatentKeys,
  kSinkSplits,  // the sink attention's key ranges on blocks of their own (sink_attention_split_floats)
  kEngramKv,
  // DSpark: the call's taps; the greedy draft head.
  kTaps,
  kDraftHiddenConfidence,
  kDraftEmbeddings,
  kDraftPartialValues,
  kDraftPartialIds,
  kDraftTokens,
  kDraftConfidence,
  // The sampler (head_draw).
  kDrawLogits,
  kSampleScratch,
  kSampleResults,
  kSlotCount,
};


}  // namespace deepinfer::backend::cuda

#pragma once
// The tensor-core index scores' launcher (indexer_mma.cu), which index_scores (indexer.cu) calls
// where index_scores_on_tensor_cores holds and after checking the parameters.
#include <cstdint>

#include "kernels/cuda/attention_kernels.h"

namespace deepinfer::kernels::cuda::detail {

void index_scores_mma(const IndexerParams& params, const SegmentRows* segments, const int32_t* row_segment,
                      int64_t rows, const float* q, const float* head_weights, float* scores, Stream stream);

}  // namespace deepinfer::kernels::cuda::detail

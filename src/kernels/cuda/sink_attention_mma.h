#pragma once
// The tensor-core sink attention's launcher (sink_attention_mma.cu), which sink_attention
// (sink_attention.cu) calls where sink_attention_on_tensor_cores holds and after checking the
// parameters.
#include <cstdint>

#include "kernels/cuda/attention_kernels.h"

namespace deepinfer::kernels::cuda::detail {

void sink_attention_mma(const AttentionParams& params, const SegmentRows* segments, const int32_t* row_segment,
                        int64_t rows, const float* q, float* attended, Stream stream);

}  // namespace deepinfer::kernels::cuda::detail

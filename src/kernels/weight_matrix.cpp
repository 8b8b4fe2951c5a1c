// The weight descriptor checks every backend's linear makes before it reads: a descriptor the
// loader got wrong would otherwise read out of bounds, so it is an Error.
#include "core/error.h"
#include "kernels/kernels.h"

namespace deepinfer::kernels {

const char* encoding_name(WeightEncoding encoding) {
  switch (encoding) {
    case WeightEncoding::F32: return "F32";
    case WeightEncoding::BF16: return "BF16";
    case WeightEncoding::FP8_E4M3: return "FP8_E4M3";
    case WeightEncoding::FP4_E2M1: return "FP4_E2M1";
  }
  return "unknown";
}

void check_weight(const WeightMatrix& w, const char* who) {
  const char* name = encoding_name(w.encoding);
  if (w.rows < 0 || w.cols < 0) fail(who, ": ", name, " weight has negative shape [", w.rows, ", ", w.cols, "]");
  if (w.rows > 0 && w.cols > 0 && w.data == nullptr) fail(who, ": ", name, " weight has no data");
  if (w.layout != WeightLayout::RowMajor)
    fail(who, ": a ", name, " weight in the expert-tile layout (a CUDA expert copy); this kernel reads row-major codes");
  if (w.encoding != WeightEncoding::FP8_E4M3 && w.encoding != WeightEncoding::FP4_E2M1) return;
  if (w.block_rows < 1 || w.block_cols < 1)
    fail(who, ": ", name, " weight has block size ", w.block_rows, "x", w.block_cols, "; both must be at least 1");
  if (w.scale_encoding != ScaleEncoding::None && w.scales == nullptr) fail(who, ": ", name, " weight has no scales");
  if (w.encoding == WeightEncoding::FP4_E2M1 && (w.cols % 2 != 0 || w.cols % w.block_cols != 0))
    fail(who, ": FP4_E2M1 weight has ", w.cols, " columns; it needs an even number and a multiple of its group size ",
         w.block_cols);
}

}  // namespace deepinfer::kernels

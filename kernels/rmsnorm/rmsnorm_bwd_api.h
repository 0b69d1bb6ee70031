// The host API of the rmsnorm_bwd family: launches a tuned variant of the plain norm's backward on device pointers.
//   forward:  out = bf16(x * rsqrt(mean(x^2) + eps) * w')        (w' = w standard | 1 + w zero-centred)
//   backward: dx = bf16(rstd * dy * w' - x * rstd^3 * mean(dy * w' * x));   dw_partial rows: column sums of
//             dy * x * rstd over the rows each (block, row slot) walked, fp32; dw = the column sums of dw_partial
//             (the caller's reduction: DwPartialRows(winner, rows) rows of `cols` fp32, contiguous).
// x, dy and dx are [rows, cols] bf16 with row i at base + 2 * i * stride bytes; weight [cols] bf16 or fp32,
// contiguous. Alignment: every pointer 16-byte aligned, strides multiples of 8 elements and >= cols. Aliasing: no
// output (dx, dw_partial) may share a byte with an input or with the other output. Graph-capturable: no host
// synchronisation, no allocation.
// Who may call it: anyone holding a LoadedVariant of this family. Thread-safety: re-entrant; the caller owns the
// stream ordering of the buffers.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "base/status.h"
#include "kernels/rmsnorm/rmsnorm_bwd_space.h"
#include "tuner/kernel_family.h"

namespace dflash::rmsnorm {

struct RmsNormBwdArgs {
  CUdeviceptr x = 0;           // bf16 [rows, cols]: the forward's input
  CUdeviceptr dy = 0;          // bf16 [rows, cols]: the gradient of the forward's output
  CUdeviceptr weight = 0;      // [cols], weight_dtype
  CUdeviceptr dx = 0;          // bf16 [rows, cols]
  CUdeviceptr dw_partial = 0;  // fp32 [DwPartialRows(winner, rows), cols], contiguous
  std::int64_t x_stride = 0, dy_stride = 0, dx_stride = 0;  // elements
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  float eps = 1e-6f;
  Kind kind = Kind::kStandard;
  WeightDtype weight_dtype = WeightDtype::kBf16;
};

BwdProblemSpec ProblemOf(const RmsNormBwdArgs& args);

// The rows of dw_partial a launch of `winner` over `rows` rows writes; InvalidArgument for a config that is not
// one of the family's.
Result<std::int64_t> DwPartialRows(const tuner::LoadedVariant& winner, std::int64_t rows);

// The checks LaunchRmsNormBackward makes first (null, misaligned or overlapping pointers, bad strides, sizes or
// eps): InvalidArgument naming the field. dw_partial_rows: the rows the caller's dw_partial holds. Needs no GPU.
Status CheckRmsNormBwdArgs(const RmsNormBwdArgs& args, std::int64_t dw_partial_rows);

// Checks the arguments against the winner (its dw_partial rows) and that the winner holds the kernel of
// ProblemOf(args), then launches it on `stream`. rows == 0 launches nothing.
Status LaunchRmsNormBackward(const tuner::LoadedVariant& winner, const RmsNormBwdArgs& args, CUstream stream);

}  // namespace dflash::rmsnorm

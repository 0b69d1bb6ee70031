// The host API of the xent family for its callers (the trainer, the workloads): launches a tuned variant on device
// pointers, one launch for R rows of V fp32 logits:
//   loss[r]   = w[r] * (lse_r - x_r[label_r]) for a valid row, else exactly 0;
//   argmax[r] = the first index of the row's maximum (NaN counts as the largest);
//   grad[r,v] = bf16(grad_scale * w[r] * (softmax(x_r)_v - [v == label_r])) for a valid row (NaN for a valid row
//               whose lse is not finite), else exactly +0;
// a row is valid when 0 <= label < vocab and w != 0: label -100 (ignore_index) and every other label outside
// [0, vocab) ignore the row (the kernel cannot report a bad device label; callers that want it an error check
// their labels on the host). reference.h defines every case (NaN, +inf, rows of -inf).
// Layout: logits row r at logits + 4 * r * row_stride bytes, rows 16-byte aligned (logits % 16 == 0, row_stride a
// multiple of 4); grad row r at grad + 2 * r * grad_row_stride bytes, rows 8-byte aligned (grad % 8 == 0,
// grad_row_stride a multiple of 4); grad must not overlap the logits. The variant decides whether the gradient is
// written (the bucket's "grad"): a gradient variant needs grad != 0, the others grad == 0.
// No host synchronisation and no allocation: a launch can be captured into a CUDA graph.
// Who may call it: anyone holding a LoadedVariant of this family. Thread-safety: re-entrant; the caller owns the
// stream ordering of the buffers.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "base/status.h"
#include "kernels/xent/xent_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::xent {

struct XentArgs {
  CUdeviceptr logits = 0;            // fp32 [rows, vocab], row stride row_stride elements
  std::int64_t row_stride = 0;       // elements, >= vocab, a multiple of 4
  CUdeviceptr labels = 0;            // int64 [rows]
  CUdeviceptr weights = 0;           // fp32 [rows]
  CUdeviceptr loss = 0;              // fp32 [rows], written
  CUdeviceptr argmax = 0;            // int64 [rows], written
  CUdeviceptr grad = 0;              // bf16 [rows, vocab], written; 0 = no gradient
  std::int64_t grad_row_stride = 0;  // elements, >= vocab, a multiple of 4 (when grad != 0)
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  float grad_scale = 1.0f;  // finite
};

// Checks the arguments (InvalidArgument naming the field) and launches the winner's kernel on `stream`; the grid
// comes from the winner's config (rows x split blocks). rows == 0 launches nothing.
Status LaunchXent(const tuner::LoadedVariant& winner, const XentArgs& args, CUstream stream);

}  // namespace dflash::xent

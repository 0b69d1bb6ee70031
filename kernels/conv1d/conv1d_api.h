// The host API of the conv1d family for its callers (the trainer, the workloads): launches a tuned variant on
// device pointers with arbitrary strides.
//   y[t, c] = silu(bias[c] + sum_{j=0..3} w[c, j] * x[t - 3 + j, c]),  x before the token's sequence start = 0.
// Tensors are bf16 (accumulation fp32): x and y addressed by element strides, weight [channels, 1, 4] contiguous
// (HF conv1d.weight), bias [channels] or none, cu_seqlens int32 [num_seqs + 1] = (0, ..., tokens) or none for
// one sequence. y must not overlap x (the halo of one thread is another thread's input).
// Who may call it: anyone holding a LoadedVariant of this family. Thread-safety: re-entrant; the caller owns the
// stream ordering of the buffers.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "base/status.h"
#include "kernels/conv1d/conv1d_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::conv1d {

struct Conv1dArgs {
  CUdeviceptr x = 0;           // bf16, (t, c) at x + 2 * (t * x_stride_t + c * x_stride_c)
  CUdeviceptr weight = 0;      // bf16 [channels, 1, 4]
  CUdeviceptr bias = 0;        // bf16 [channels]; 0 = no bias
  CUdeviceptr y = 0;           // bf16, (t, c) at y + 2 * (t * y_stride_t + c * y_stride_c)
  CUdeviceptr cu_seqlens = 0;  // int32 [num_seqs + 1]; 0 = one sequence of all tokens (num_seqs must be 1)
  std::int64_t tokens = 0;
  std::int64_t channels = 0;
  std::int64_t num_seqs = 1;
  std::int64_t x_stride_t = 0, x_stride_c = 0;  // elements
  std::int64_t y_stride_t = 0, y_stride_c = 0;  // elements

  // Contiguous x and y in `layout` ([tokens, channels] or [channels, tokens]).
  static Conv1dArgs Contiguous(Layout layout, CUdeviceptr x, CUdeviceptr weight, CUdeviceptr y,
                               std::int64_t tokens, std::int64_t channels);
};

// Checks the arguments (InvalidArgument naming the field) and launches the winner's kernel on `stream`; the grid
// comes from the winner's config. tokens == 0 launches nothing. Works for any strides: the vector path is used
// only where pointers and strides allow it.
Status LaunchConv1d(const tuner::LoadedVariant& winner, const Conv1dArgs& args, CUstream stream);

}  // namespace dflash::conv1d

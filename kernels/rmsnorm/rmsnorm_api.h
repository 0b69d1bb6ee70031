// The host API of the rmsnorm family for its callers (the trainer, the workloads): launches a tuned variant on
// device pointers with a row stride per tensor.
//   s = residual ? bf16(x + residual) : x;   sum_out = s (when given)
//   out = bf16(s * rsqrt(mean(s^2) + eps) * (w | 1 + w) * (silu(gate) when gated))      (fp32 math, row-wise)
// Tensors are [rows, cols] bf16 with row i of tensor t at t + 2 * i * t_stride bytes; weight is [cols] contiguous,
// bf16 or fp32. Which kernel runs is fixed by the problem (cols, kind, residual given or not, gate given or not,
// weight dtype): ProblemOf(args) is the problem whose tuned winner to pass; a winner of another problem is refused.
// Alignment: every pointer 16-byte aligned and every stride a multiple of 8 elements (each row is whole 16-byte
// vectors), strides >= cols.
// Aliasing: sum_out may be the residual itself (same pointer, same stride: the in-place update of the residual
// stream). Apart from that no output (out, sum_out) may share a byte with another output or with an input (x,
// residual, gate, weight); inputs may overlap each other. Checked exactly for tensors of equal strides (two
// interleaved views of one buffer are fine) and conservatively by address range otherwise.
// Graph-capturable: no host synchronisation, no allocation.
// Who may call it: anyone holding a LoadedVariant of this family. Thread-safety: re-entrant; the caller owns the
// stream ordering of the buffers.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "base/status.h"
#include "kernels/rmsnorm/rmsnorm_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::rmsnorm {

struct RmsNormArgs {
  CUdeviceptr x = 0;         // bf16 [rows, cols]
  CUdeviceptr residual = 0;  // bf16 [rows, cols]; 0 = no residual add
  CUdeviceptr gate = 0;      // bf16 [rows, cols]; 0 = no gate
  CUdeviceptr weight = 0;    // [cols], weight_dtype
  CUdeviceptr sum_out = 0;   // bf16 [rows, cols] = bf16(x + residual); 0 = not written (needs a residual)
  CUdeviceptr out = 0;       // bf16 [rows, cols]
  std::int64_t x_stride = 0, residual_stride = 0, gate_stride = 0, sum_out_stride = 0, out_stride = 0;  // elements
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  float eps = 1e-6f;
  Kind kind = Kind::kStandard;
  WeightDtype weight_dtype = WeightDtype::kBf16;

  // Contiguous x and out ([rows, cols], stride cols); add residual / gate / sum_out (and their strides) after.
  static RmsNormArgs Contiguous(CUdeviceptr x, CUdeviceptr weight, CUdeviceptr out, std::int64_t rows,
                                std::int64_t cols, Kind kind, WeightDtype weight_dtype, float eps);
};

// The problem of a launch: its rows, cols, kind, weight dtype, and whether a residual and a gate are given.
ProblemSpec ProblemOf(const RmsNormArgs& args);

// The argument checks LaunchRmsNorm makes first: InvalidArgument naming the field (null, misaligned or overlapping
// pointers, bad strides, sizes or eps); Ok otherwise. Needs no GPU.
Status CheckRmsNormArgs(const RmsNormArgs& args);

// Checks the arguments (CheckRmsNormArgs) and that the winner holds the kernel of ProblemOf(args),
// then launches it on `stream`; the grid comes from the winner's config. rows == 0 launches nothing.
Status LaunchRmsNorm(const tuner::LoadedVariant& winner, const RmsNormArgs& args, CUstream stream);

}  // namespace dflash::rmsnorm

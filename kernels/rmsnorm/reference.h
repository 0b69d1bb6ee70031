// The float64 CPU reference of the rmsnorm family (plain loops). Owns: the definition of the operator on the host
// side, one row at a time:
//   s = residual ? bf16(float(x) + float(r)) : x      (the bf16 sum LibTorch's `x + r` gives: fp32 add, then
//                                                      round to nearest even; exactly representable, so it is
//                                                      compared bit for bit)
//   n = s / sqrt(mean(s^2) + eps)
//   y = n * w (standard) | n * (1 + w) (zero-centred);  y *= z / (1 + exp(-z)) when gated
// Everything after s in float64, nothing rounded (the kernel's bf16 output is compared with a tolerance).
// Who may call it: the rmsnorm workload's check and the tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/rmsnorm/rmsnorm_problem.h"

namespace dflash::rmsnorm {

// One host-side problem. Row i of x starts at x[i * x_stride] (likewise residual and gate, each with its own stride);
// residual / gate empty = none. The weight is [cols]: weight_bf16 or weight_fp32, exactly one of them non-empty.
struct ReferenceInput {
  std::span<const std::uint16_t> x;
  std::span<const std::uint16_t> residual;
  std::span<const std::uint16_t> gate;
  std::span<const std::uint16_t> weight_bf16;
  std::span<const float> weight_fp32;
  std::int64_t x_stride = 0;
  std::int64_t residual_stride = 0;
  std::int64_t gate_stride = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  Kind kind = Kind::kStandard;
  float eps = 1e-6f;
};

struct ReferenceOutput {
  std::vector<double> out;       // [rows, cols] row-major (out[i * cols + c])
  std::vector<std::uint16_t> sum;  // [rows, cols] bf16 bits of s when there is a residual, else empty
};

// bf16(float(x) + float(r)): the residual sum as LibTorch computes it for bf16 tensors.
std::uint16_t ResidualSum(std::uint16_t x, std::uint16_t r);

// Preconditions (the caller's to keep): the spans cover every index the strides reach.
ReferenceOutput ReferenceRmsNorm(const ReferenceInput& in);

// The backward of the plain norm (no residual, no gate; rmsnorm_bwd.cuh), in float64 from the bf16 x and dy:
//   n = x / sqrt(mean(x^2) + eps), g = dy * w';  dx = (g - n * mean(g * n)) / sqrt(mean(x^2) + eps);
//   dw = sum over rows of dy * n  (w' = w standard, 1 + w zero-centred: the same dw).
// `in.residual` and `in.gate` must be empty; dy has its own stride.
// dx_scale and dw_abs are the magnitudes the terms of each result reach (what an fp32 kernel's rounding errors scale
// with, for tolerances): dx_scale[i] = (max |g| + max |n| * |mean(g * n)|) / rms of row i, dw_abs[c] = sum over rows
// of |dy * n|.
struct ReferenceGradients {
  std::vector<double> dx;        // [rows, cols] row-major
  std::vector<double> dw;        // [cols]
  std::vector<double> dx_scale;  // [rows]
  std::vector<double> dw_abs;    // [cols]
};
ReferenceGradients ReferenceRmsNormBackward(const ReferenceInput& in, std::span<const std::uint16_t> dy,
                                            std::int64_t dy_stride);

}  // namespace dflash::rmsnorm

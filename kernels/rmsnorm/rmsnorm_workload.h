// Rmsnorm workloads: one problem instance on a device with fresh random inputs (x and the residual ~ N(0, 1) times a
// random power of two per row, so rows differ in scale by up to 2^12; the gate ~ N(0, 2); weights ~ U(-2, 2) for the
// standard kind, U(-0.9, 0.9) for the zero-centred one, fp32 weights with all 24 mantissa bits used), output
// poisoning, launch through LaunchRmsNorm, and the check against the float64 reference: out within the tolerance
// below, sum_out bit for bit, every byte outside the outputs' rows untouched.
// Options let tests reach what a contiguous tensor never does: padded (strided) rows per tensor, sum_out written
// in place over the residual, a residual without sum_out.
// Who may call it: the family's MakeWorkload and the tests. Thread-safety: a workload belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/rmsnorm/rmsnorm_problem.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_family.h"

namespace dflash::rmsnorm {

struct WorkloadOptions {
  // Extra elements after each row of a tensor (multiples of 8, so rows stay 16-byte aligned); the gaps hold NaN.
  std::int64_t x_pad = 0, residual_pad = 0, gate_pad = 0, sum_out_pad = 0, out_pad = 0;
  bool write_sum = true;      // with a residual: pass sum_out
  bool sum_in_place = false;  // sum_out is the residual's buffer (same pointer and stride; sum_out_pad unused)
  float eps = 1e-6f;
};

// Tolerance of the check on out: |y - ref| <= ulp(ref) + kAbsTol, ulp(ref) the spacing of bf16 values at |ref|.
// The kernel's fp32 value before its final rounding is within a few 2^-20 of ref relative to it (a sum of at most
// 16384 squares in fp32 in a fixed tree, rsqrtf's 2 ulp, __expf's few ulp in the gate), so rounding it to bf16 (half
// an ulp) stays well inside one ulp. kAbsTol covers what is absolute rather than relative: the fp32 rounding of
// 1 + w for fp32 weights (2^-24 · |n|, |n| <= 8 on these inputs) and the gate's fast silu, which returns -0 below
// z ~ -87 where the exact value is below 1e-36.
constexpr double kAbsTol = 1e-6;

Result<std::unique_ptr<tuner::Workload>> MakeRmsNormWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                             std::uint64_t seed, const WorkloadOptions& options = {});

}  // namespace dflash::rmsnorm

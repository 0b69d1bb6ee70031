// Rmsnorm_bwd workloads: one backward problem on a device with fresh random inputs (x ~ N(0, 1) times a random power
// of two per row, dy ~ N(0, 1), weights as the forward's workload), outputs poisoned (NaN), launch through
// LaunchRmsNormBackward, and the check against the float64 reference: dx within ulp(ref) + kBwdRelTol * the row's
// term magnitude, dw (the column sums of dw_partial, summed here in float64) within kBwdRelTol * sum |dy * n| of its
// column, every element between dx's rows untouched.
// Who may call it: the family's MakeWorkload and the tests. Thread-safety: a workload belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/rmsnorm/rmsnorm_bwd_space.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_family.h"

namespace dflash::rmsnorm {

struct BwdWorkloadOptions {
  // Extra elements after each row (multiples of 8); the gaps hold NaN.
  std::int64_t x_pad = 0, dy_pad = 0, dx_pad = 0;
  float eps = 1e-6f;
};

// fp32 rounding relative to the magnitude of the terms: sums of at most 16384 products in a fixed tree (a few
// 2^-24 each), rsqrtf's 2 ulp, cubed in coef; 1e-5 leaves a factor of ~10 over what such sums reach.
constexpr double kBwdRelTol = 1e-5;

Result<std::unique_ptr<tuner::Workload>> MakeRmsNormBwdWorkload(const gpu::Context& ctx, const BwdProblemSpec& spec,
                                                                std::uint64_t seed,
                                                                const BwdWorkloadOptions& options = {});

}  // namespace dflash::rmsnorm

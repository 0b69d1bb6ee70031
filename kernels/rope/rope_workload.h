// Rope workloads: one problem instance on a device with fresh random inputs (x ~ N(0, 1) times a random power of two
// per token, the tables of random positions in [0, 2^17) with theta 1e6, MakeRope's formula), out poisoned (NaN),
// launch through LaunchRope, and the check against the float64 reference: the rotated part within
// ulp(ref) + kRopeRelTol * (|x[i]| + |x[i + R/2]|), the tail bit for bit.
// Options reach what a contiguous tensor never does: strided heads (the target's q is every other 256 of
// [query | gate] heads), a gap after each token's heads, and the backward's sign.
// Who may call it: the family's MakeWorkload and the tests. Thread-safety: a workload belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/rope/rope_space.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_family.h"

namespace dflash::rope {

struct WorkloadOptions {
  std::int64_t head_pad = 0;   // elements after each head of x (multiple of 8); the gaps hold NaN
  std::int64_t token_pad = 0;  // elements after each token's heads (multiple of 8)
  float sign = 1.0f;
};

// fp32 rounding of two products and their sum: at most ~3 * 2^-24 of |x1 c| + |x2 s|.
constexpr double kRopeRelTol = 1e-6;

Result<std::unique_ptr<tuner::Workload>> MakeRopeWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                          std::uint64_t seed, const WorkloadOptions& options = {});

}  // namespace dflash::rope

// Swiglu workloads: one problem instance on a device with fresh random inputs (gate ~ N(0, 3), up ~ N(0, 1) times a
// random power of two per row), out poisoned (NaN), launch through LaunchSwiglu, and the check against the float64
// reference (reference.h's tolerance per element). Options: padded rows of gate and up.
// Who may call it: the family's MakeWorkload and the tests. Thread-safety: a workload belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/swiglu/swiglu_space.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_family.h"

namespace dflash::swiglu {

struct WorkloadOptions {
  std::int64_t gate_pad = 0, up_pad = 0;  // elements after each row (multiples of 8); the gaps hold NaN
};

Result<std::unique_ptr<tuner::Workload>> MakeSwigluWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                            std::uint64_t seed, const WorkloadOptions& options = {});

}  // namespace dflash::swiglu
